#include "search/cost_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generator/target.hpp"
#include "generator/variant.hpp"
#include "layer/program.hpp"

namespace ft::model {
namespace {

constexpr std::array<std::string_view, 3> kPhases{"ab", "long", "short"};

// Ridge penalties tried by cross-validation (features are standardised).
constexpr std::array<double, 8> kLambdas{0.03, 0.1, 0.3, 1, 3, 10, 30, 100};
// At most this many held-out buckets in cross-validation.
constexpr std::size_t kMaxFolds = 12;
// Residual transfer: a sample `d` octaves of T away weighs exp(-d / kOctaves);
// one of another problem weighs kOtherProblem as much; kShrink pulls the
// carried residual towards zero (it is a weighted mean over weight + kShrink).
constexpr double kOctaves = 2.0, kOtherProblem = 0.25, kShrink = 0.25;
// Standardisation: a column is scaled by its spread, but by no less than
// kMinSpread (features are log2 or 0/1: a column that barely moves in training,
// such as the experts reached once T is large, must not get a huge weight
// cheaply), and a standardised value is held within +-kMaxZ (extrapolating
// far outside the training range is not believed).
constexpr double kMinSpread = 0.25, kMaxZ = 6.0;

double slog2(double x) { return x >= 0 ? std::log2(1 + x) : -std::log2(1 - x); }

// Every leaf of the variant's JSON parameters as a feature.
void flatten(const nlohmann::json& j, const std::string& path, std::map<std::string, double>& out) {
  using T = nlohmann::json::value_t;
  switch (j.type()) {
    case T::object:
      for (const auto& [k, v] : j.items()) flatten(v, path.empty() ? k : path + "." + k, out);
      break;
    case T::array:
      for (std::size_t i = 0; i < j.size(); ++i) flatten(j[i], fmt::format("{}[{}]", path, i), out);
      break;
    case T::boolean:
      out["param." + path] = j.get<bool>() ? 1 : 0;
      out["has.param." + path] = 1;
      break;
    case T::number_integer:
    case T::number_unsigned:
    case T::number_float:
      out["param." + path] = slog2(j.get<double>());
      out["has.param." + path] = 1;
      break;
    case T::string: out["param." + path + "=" + j.get<std::string>()] = 1; break;
    default: break;
  }
}

void add_resource(std::map<std::string, double>& f, const char* name, const std::optional<int>& v) {
  if (!v) return;
  f[std::string("res.") + name] = std::log2(1.0 + std::max(0, *v));
  f[std::string("has.res.") + name] = 1;
}


// What the layer program launches for a variant alone at T: its stage step's
// grid and block, the row block, the capacity of sorted rows, and the bytes
// of the weights the stage reads.
struct Launch {
  double blocks = 0, threads = 0, align_block = 1, max_rows = 0, weight_bytes = 0;
};

std::optional<Launch> launch_of(const db::VariantRecord& v, const Problem& p, int tokens) {
  const Target* t = find_target(v.target);
  auto var = Variant::from_json(v.params);
  if (!t || !var) return std::nullopt;
  const LayerRecipe r{t, p, {*var}};
  auto prog = build_program(r, tokens);
  if (!prog) return std::nullopt;
  for (const Step& s : prog->steps) {
    if (s.op != Step::Op::launch || (s.role != Role::stage1 && s.role != Role::stage2)) continue;
    Launch l;
    l.blocks = double(s.shape.grid_x) * s.shape.grid_y * s.shape.grid_z;
    l.threads = s.shape.block;
    l.align_block = prog->align_block;
    l.max_rows = double(prog->max_padded_rows);
    l.weight_bytes = double(prog->bytes[std::size_t(s.w1)] + prog->bytes[std::size_t(s.w2)]);
    return l;
  }
  return std::nullopt;
}

// launch.* and the stage's work (bucket.log2_flops, bucket.log2_weight_bytes).
void add_launch(std::map<std::string, double>& f, const db::VariantRecord& v, const Problem& p, int tokens,
                const db::DeviceRecord* dev) {
  const auto l = launch_of(v, p, tokens);
  if (!l || l->blocks <= 0) return;
  const double pairs = double(tokens) * p.topk, active_experts = std::max(1.0, p.expected_active_experts(tokens));
  // Rows that hold pairs under a uniform routing: each reached expert's share, padded to the row block.
  const double rows = std::min(l->max_rows, active_experts * std::ceil(pairs / active_experts / l->align_block) * l->align_block);
  const double share = rows / l->max_rows;
  f["has.launch"] = 1;
  f["launch.log2_blocks"] = std::log2(l->blocks);
  f["launch.log2_threads"] = std::log2(l->threads);
  f["launch.log2_pad_ratio"] = std::log2(rows / pairs);
  f["launch.active_share"] = share;
  f["bucket.log2_flops"] = std::log2(2 * pairs * l->weight_bytes / (double(p.experts) * p.element_bytes()));
  f["bucket.log2_weight_bytes"] = std::log2(l->weight_bytes * active_experts / p.experts);
  // Each row block of an expert reads that expert's weights again (what L2 does not keep).
  f["launch.log2_weight_reads"] = std::log2(l->weight_bytes / p.experts * rows / l->align_block);
  const Target* t = find_target(v.target);
  if (!t || !dev || dev->compute_units <= 0 || !v.resources.occupancy || *v.resources.occupancy <= 0) return;
  // Blocks one SM / CU holds at the analysed occupancy (waves per SIMD), and the waves the rows need.
  const double waves_per_block = std::ceil(l->threads / t->wave_size);
  const double resident = std::max(1.0, std::floor(*v.resources.occupancy * t->simds_per_cu / waves_per_block));
  const double waves = l->blocks * share / (dev->compute_units * resident);
  f["has.launch.waves"] = 1;
  f["launch.log2_waves"] = std::log2(waves);
  f["launch.log2_wave_fill"] = std::log2(waves / std::ceil(waves));
}

bool is_variant_feature(const std::string& name) { return !name.starts_with("bucket."); }

// Average ranks (ties share their mean rank).
std::vector<double> ranks(std::span<const double> v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    for (std::size_t k = i; k <= j; ++k) r[order[k]] = 0.5 * double(i + j);
    i = j + 1;
  }
  return r;
}

}  // namespace

std::span<const std::string_view> timing_phases() { return kPhases; }

double spearman(std::span<const double> a, std::span<const double> b) {
  if (a.size() != b.size() || a.size() < 2) return 0;
  const std::vector<double> ra = ranks(a), rb = ranks(b);
  const double n = double(a.size()), mean = (n - 1) / 2;
  double sab = 0, saa = 0, sbb = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) {
    sab += (ra[i] - mean) * (rb[i] - mean);
    saa += (ra[i] - mean) * (ra[i] - mean);
    sbb += (rb[i] - mean) * (rb[i] - mean);
  }
  return saa > 0 && sbb > 0 ? sab / std::sqrt(saa * sbb) : 0;
}

std::map<std::string, double> features_of(const Dataset& d, const Point& p) {
  std::map<std::string, double> f;
  const auto pr = d.problems.find(p.problem_id);
  if (pr == d.problems.end() || p.tokens <= 0) return f;
  // A row this build cannot read (a dtype it refuses) gives no features: not a training point.
  const auto read = pr->second.to_problem();
  if (!read) return f;
  const Problem& prob = *read;
  f["bucket.log2_tokens"] = std::log2(double(p.tokens));
  f["bucket.log2_experts"] = std::log2(std::max(1, prob.experts));
  f["bucket.log2_hidden"] = std::log2(std::max(1, prob.hidden));
  f["bucket.log2_inter"] = std::log2(std::max(1, prob.inter));
  f["bucket.log2_topk"] = std::log2(std::max(1, prob.topk));
  f["bucket.log2_active_experts"] = std::log2(std::max(1.0, prob.expected_active_experts(p.tokens)));
  f["bucket.dtype=" + pr->second.dtype] = 1;
  f["bucket.activation=" + pr->second.activation] = 1;
  f["bucket.routing=" + pr->second.routing] = 1;
  const auto v = d.variants.find(p.variant_id);
  if (v == d.variants.end()) return f;
  flatten(v->second.params, "", f);
  const db::Resources& r = v->second.resources;
  add_resource(f, "vgprs", r.vgprs);
  add_resource(f, "agprs", r.agprs);
  add_resource(f, "sgprs", r.sgprs);
  add_resource(f, "regs", r.regs);
  add_resource(f, "lds_bytes", r.lds_bytes);
  add_resource(f, "scratch_bytes", r.scratch_bytes);
  add_resource(f, "spills", r.spills);
  add_resource(f, "occupancy", r.occupancy);
  const auto dev = d.devices.find(p.device_id);
  add_launch(f, v->second, prob, p.tokens, dev == d.devices.end() ? nullptr : &dev->second);
  return f;
}

Result<Dataset> load_dataset(db::Store& store, std::string_view kind, const db::DeviceRecord& device,
                             std::optional<Bucket> exclude) {
  Dataset d;
  d.kind = std::string(kind);
  d.device_name = device.name;
  d.arch = device.arch;
  for (const db::DeviceRecord& dev : FT_TRY(store.devices()))
    if (dev.name == device.name && dev.arch == device.arch) d.devices.emplace(dev.id, dev);
  db::VariantFilter vf;
  vf.kind = d.kind;
  vf.status = db::CompileStatus::ok;
  for (db::VariantRecord& v : FT_TRY(store.variants(vf))) d.variants.emplace(v.id, std::move(v));
  for (const db::ProblemRecord& p : FT_TRY(store.problems())) d.problems.emplace(p.id, p);
  // Per point: (phase rank, -id) of the best row so far; lower is better.
  std::map<Point, std::pair<std::pair<std::size_t, std::int64_t>, Sample>> best;
  for (const auto& [device_id, dev] : d.devices) {
    db::MeasurementFilter mf;
    mf.device_id = device_id;
    mf.status = db::MeasurementStatus::ok;
    for (const db::MeasurementRecord& m : FT_TRY(store.measurements(mf))) {
      const auto phase = std::find(kPhases.begin(), kPhases.end(), m.phase);
      if (phase == kPhases.end() || !m.median_us || !(*m.median_us > 0) || !d.variants.contains(m.variant_id)) continue;
      const Point at = Point::of(m.key());
      if (exclude && bucket_of(at) == *exclude) continue;
      const std::pair<std::size_t, std::int64_t> rank{std::size_t(phase - kPhases.begin()), -m.id};
      auto it = best.find(at);
      if (it == best.end() || rank < it->second.first) best[at] = {rank, Sample{at, *m.median_us, m.run_id}};
    }
  }
  for (auto& [at, s] : best) d.samples.push_back(s.second);
  return d;
}

void compute_features(Dataset& d) {
  d.features.clear();
  for (const Sample& s : d.samples) d.features.push_back(features_of(d, s.at));
}

// ---- the fit ------------------------------------------------------------------

namespace {

// The columns of the regression: base features, then each variant feature
// times (log2 T - its training mean); standardised; constant ones dropped.
struct Design {
  std::vector<std::string> names;       // every column before dropping: `base` sorted features, then interactions
  std::size_t base = 0;
  std::vector<int> interacts;           // per column: the base column it multiplies by log T, or -1
  std::vector<double> mean, sd;
  std::vector<std::size_t> kept;        // columns that vary in training
  double t_center = 0;

  std::vector<double> raw(const std::map<std::string, double>& f) const {
    std::vector<double> x(names.size(), 0.0);
    const auto lt = f.find("bucket.log2_tokens");
    const double t = (lt == f.end() ? 0.0 : lt->second) - t_center;
    // The base columns are sorted as the map is: one walk over both.
    auto it = f.begin();
    for (std::size_t c = 0; c < base && it != f.end();) {
      const int cmp = names[c].compare(it->first);
      if (cmp == 0) x[c++] = (it++)->second;
      else if (cmp < 0) ++c;
      else ++it;
    }
    for (std::size_t c = base; c < names.size(); ++c) x[c] = x[std::size_t(interacts[c])] * t;
    return x;
  }
  // The standardised row with a leading 1 (the intercept).
  std::vector<double> row(const std::map<std::string, double>& f) const {
    const std::vector<double> x = raw(f);
    std::vector<double> r{1.0};
    for (std::size_t c : kept) r.push_back(std::clamp((x[c] - mean[c]) / std::max(sd[c], kMinSpread), -kMaxZ, kMaxZ));
    return r;
  }
  std::size_t width() const { return kept.size() + 1; }
};

Design make_design(const std::vector<const std::map<std::string, double>*>& rows, const ModelOptions& opt) {
  Design d;
  std::set<std::string> names;
  double t_sum = 0;
  for (const auto* f : rows) {
    for (const auto& [name, v] : *f)
      if (opt.features || !is_variant_feature(name)) names.insert(name);
    if (auto it = f->find("bucket.log2_tokens"); it != f->end()) t_sum += it->second;
  }
  d.t_center = rows.empty() ? 0 : t_sum / double(rows.size());
  d.names.assign(names.begin(), names.end());
  d.base = d.names.size();
  d.interacts.assign(d.names.size(), -1);
  for (std::size_t c = 0, base = d.names.size(); c < base; ++c)
    if (is_variant_feature(d.names[c]) && !d.names[c].starts_with("has.")) {
      d.names.push_back("x." + d.names[c]);
      d.interacts.push_back(int(c));
    }
  d.mean.assign(d.names.size(), 0.0);
  d.sd.assign(d.names.size(), 0.0);
  std::vector<std::vector<double>> x;
  for (const auto* f : rows) x.push_back(d.raw(*f));
  const double n = std::max<double>(1, double(rows.size()));
  for (const auto& r : x)
    for (std::size_t c = 0; c < r.size(); ++c) d.mean[c] += r[c] / n;
  for (const auto& r : x)
    for (std::size_t c = 0; c < r.size(); ++c) d.sd[c] += (r[c] - d.mean[c]) * (r[c] - d.mean[c]) / n;
  for (std::size_t c = 0; c < d.names.size(); ++c) {
    d.sd[c] = std::sqrt(d.sd[c]);
    if (d.sd[c] > 1e-9) d.kept.push_back(c);
  }
  return d;
}

// Solves (G + lambda I') w = b by Cholesky, I' leaving the intercept (index 0) unpenalised.
std::vector<double> solve_ridge(std::vector<double> g, std::vector<double> b, std::size_t p, double lambda) {
  for (std::size_t i = 1; i < p; ++i) g[i * p + i] += lambda;
  g[0] += 1e-9;  // an all-constant design still solves
  for (std::size_t j = 0; j < p; ++j) {
    double s = g[j * p + j];
    for (std::size_t k = 0; k < j; ++k) s -= g[j * p + k] * g[j * p + k];
    const double l = std::sqrt(std::max(s, 1e-12));
    g[j * p + j] = l;
    for (std::size_t i = j + 1; i < p; ++i) {
      double t = g[i * p + j];
      for (std::size_t k = 0; k < j; ++k) t -= g[i * p + k] * g[j * p + k];
      g[i * p + j] = t / l;
    }
  }
  for (std::size_t i = 0; i < p; ++i) {  // L z = b
    for (std::size_t k = 0; k < i; ++k) b[i] -= g[i * p + k] * b[k];
    b[i] /= g[i * p + i];
  }
  for (std::size_t i = p; i-- > 0;) {  // L^T w = z
    for (std::size_t k = i + 1; k < p; ++k) b[i] -= g[k * p + i] * b[k];
    b[i] /= g[i * p + i];
  }
  return b;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Gram matrix and right-hand side of rows `idx` of a design matrix.
void accumulate(const std::vector<std::vector<double>>& a, const std::vector<double>& y, std::span<const std::size_t> idx,
                std::vector<double>& g, std::vector<double>& b, double sign) {
  const std::size_t p = b.size();
  for (std::size_t i : idx) {
    const std::vector<double>& r = a[i];
    for (std::size_t j = 0; j < p; ++j) {
      b[j] += sign * r[j] * y[i];
      for (std::size_t k = 0; k < p; ++k) g[j * p + k] += sign * r[j] * r[k];
    }
  }
}

// A variant's own residual at one point it was timed at.
struct Residual {
  std::int64_t problem_id = 0;
  double log2_tokens = 0, value = 0;
};
using ResidualTable = std::map<std::string, std::vector<Residual>>;  // by kernel name

double transfer_weight(double log2_tokens_apart, bool same_problem) {
  return std::exp(-std::abs(log2_tokens_apart) / kOctaves) * (same_problem ? 1.0 : kOtherProblem);
}

double carried(const ResidualTable& table, const std::string& kernel, std::int64_t problem_id, double log2_tokens) {
  const auto it = table.find(kernel);
  if (it == table.end()) return 0;
  double sw = 0, swr = 0;
  for (const Residual& r : it->second) {
    const double w = transfer_weight(r.log2_tokens - log2_tokens, r.problem_id == problem_id);
    sw += w;
    swr += w * r.value;
  }
  return swr / (sw + kShrink);
}

}  // namespace

struct CostModel::Impl {
  Design design;
  std::vector<double> w;
  ModelOptions opt;
  ResidualTable residuals;
};

CostModel::CostModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CostModel::CostModel(CostModel&&) noexcept = default;
CostModel& CostModel::operator=(CostModel&&) noexcept = default;
CostModel::~CostModel() = default;

namespace {

struct Training {
  const Dataset& d;
  std::vector<std::size_t> idx;                 // samples of d
  std::vector<std::vector<double>> a;           // design rows, one per idx entry
  std::vector<double> y;                        // ln time
  std::vector<Bucket> bucket;
  std::vector<std::string> kernel;
  std::vector<double> log2_tokens;
  std::vector<std::size_t> kernel_id;                 // per row: its kernel's index in rows_of_kernel
  std::vector<std::vector<std::size_t>> rows_of_kernel;

  void index_kernels() {
    std::map<std::string, std::size_t> ids;
    for (const std::string& k : kernel) {
      const auto [it, fresh] = ids.emplace(k, rows_of_kernel.size());
      if (fresh) rows_of_kernel.emplace_back();
      rows_of_kernel[it->second].push_back(kernel_id.size());
      kernel_id.push_back(it->second);
    }
  }
};

ResidualTable residual_table(const Training& t, const std::vector<double>& w) {
  ResidualTable table;
  for (std::size_t i = 0; i < t.y.size(); ++i)
    table[t.kernel[i]].push_back({t.bucket[i].problem_id, t.log2_tokens[i], t.y[i] - dot(t.a[i], w)});
  return table;
}

// A held-out row's prediction: the regression, plus (transfer) the residuals
// (`resid`, of every row) of its variant's rows that are not held out.
double predict_held(const Training& t, std::size_t i, const std::vector<double>& w, const std::vector<double>& resid,
                    const std::vector<char>& held, bool transfer) {
  const double y = dot(t.a[i], w);
  if (!transfer) return y;
  double sw = 0, swr = 0;
  for (std::size_t j : t.rows_of_kernel[t.kernel_id[i]]) {
    if (held[j]) continue;
    const double wt = transfer_weight(t.log2_tokens[j] - t.log2_tokens[i], t.bucket[j].problem_id == t.bucket[i].problem_id);
    sw += wt;
    swr += wt * resid[j];
  }
  return y + swr / (sw + kShrink);
}

struct CvResult {
  double lambda = kLambdas[2];
  double spearman = 0;
  std::size_t folds = 0;
};

// Leave-one-bucket-out over at most kMaxFolds buckets spread over the
// training set: the penalty with the least within-bucket squared error (the
// error of a bucket's times about their own mean: what ranking needs), and
// that penalty's mean Spearman.
CvResult cross_validate(const Training& t, const std::vector<double>& g, const std::vector<double>& b, bool transfer) {
  std::map<Bucket, std::vector<std::size_t>> by_bucket;
  for (std::size_t i = 0; i < t.idx.size(); ++i) by_bucket[t.bucket[i]].push_back(i);
  CvResult best;
  if (by_bucket.size() < 2) return best;
  std::vector<const std::vector<std::size_t>*> folds;
  const std::size_t step = std::max<std::size_t>(1, (by_bucket.size() + kMaxFolds - 1) / kMaxFolds);
  std::size_t k = 0;
  for (const auto& [bucket, rows] : by_bucket)
    if (k++ % step == 0 && rows.size() >= 2) folds.push_back(&rows);
  const std::size_t p = b.size();
  std::vector<double> sse(kLambdas.size(), 0.0), rho(kLambdas.size(), 0.0);
  for (const std::vector<std::size_t>* fold : folds) {
    std::vector<double> gf = g, bf = b;
    accumulate(t.a, t.y, *fold, gf, bf, -1.0);
    std::vector<char> held(t.idx.size(), 0);
    for (std::size_t i : *fold) held[i] = 1;
    for (std::size_t l = 0; l < kLambdas.size(); ++l) {
      const std::vector<double> w = solve_ridge(gf, bf, p, kLambdas[l]);
      std::vector<double> resid(transfer ? t.y.size() : 0);
      for (std::size_t j = 0; j < resid.size(); ++j) resid[j] = held[j] ? 0 : t.y[j] - dot(t.a[j], w);
      std::vector<double> pred, meas;
      for (std::size_t i : *fold) {
        pred.push_back(predict_held(t, i, w, resid, held, transfer));
        meas.push_back(t.y[i]);
      }
      double mean_err = 0;
      for (std::size_t j = 0; j < pred.size(); ++j) mean_err += (meas[j] - pred[j]) / double(pred.size());
      for (std::size_t j = 0; j < pred.size(); ++j) sse[l] += std::pow(meas[j] - pred[j] - mean_err, 2);
      rho[l] += spearman(pred, meas);
    }
  }
  if (folds.empty()) return best;
  const std::size_t l = std::size_t(std::min_element(sse.begin(), sse.end()) - sse.begin());
  return {kLambdas[l], rho[l] / double(folds.size()), folds.size()};
}

}  // namespace

Result<CostModel> CostModel::fit(const Dataset& d, std::span<const std::size_t> train, const ModelOptions& opt) {
  std::vector<std::size_t> all;
  if (train.empty()) {
    all.resize(d.samples.size());
    std::iota(all.begin(), all.end(), 0);
    train = all;
  }
  if (train.empty())
    return fail(Errc::invalid_input, fmt::format("no {} timings on {} to fit a cost model on", d.kind, d.device_name));
  Training t{d, {train.begin(), train.end()}, {}, {}, {}, {}, {}};
  const bool cached = d.features.size() == d.samples.size();
  std::vector<std::map<std::string, double>> computed(cached ? 0 : t.idx.size());
  std::vector<const std::map<std::string, double>*> rows;
  for (std::size_t k = 0; k < t.idx.size(); ++k) {
    const std::size_t i = t.idx[k];
    const Sample& s = d.samples.at(i);
    if (!cached) computed[k] = features_of(d, s.at);
    rows.push_back(cached ? &d.features[i] : &computed[k]);
    t.y.push_back(std::log(s.time_us));
    t.bucket.push_back(bucket_of(s.at));
    const auto v = d.variants.find(s.at.variant_id);
    t.kernel.push_back(v == d.variants.end() ? std::string() : v->second.kernel_name);
    t.log2_tokens.push_back(std::log2(double(s.at.tokens)));
  }
  auto impl = std::make_unique<Impl>();
  impl->opt = opt;
  impl->design = make_design(rows, opt);
  for (const auto* f : rows) t.a.push_back(impl->design.row(*f));
  t.index_kernels();
  const std::size_t p = impl->design.width();
  std::vector<double> g(p * p, 0.0), b(p, 0.0);
  std::vector<std::size_t> every(t.idx.size());
  std::iota(every.begin(), every.end(), 0);
  accumulate(t.a, t.y, every, g, b, 1.0);
  const CvResult cv = cross_validate(t, g, b, opt.transfer);
  impl->w = solve_ridge(g, b, p, cv.lambda);
  if (opt.transfer) impl->residuals = residual_table(t, impl->w);
  std::set<Bucket> buckets(t.bucket.begin(), t.bucket.end());
  CostModel m(std::move(impl));
  m.report_ = {t.idx.size(), buckets.size(), p - 1, cv.lambda, cv.spearman, cv.folds};
  return m;
}

double CostModel::predict_us(const Dataset& d, const Point& p) const {
  const std::vector<double> r = impl_->design.row(features_of(d, p));
  double y = dot(r, impl_->w);
  if (impl_->opt.transfer)
    if (const auto v = d.variants.find(p.variant_id); v != d.variants.end())
      y += carried(impl_->residuals, v->second.kernel_name, p.problem_id, std::log2(double(p.tokens)));
  return std::exp(y);
}

}  // namespace ft::model
