#include "search/model_check.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>

namespace ft::model {
namespace {

struct Method {
  const char* name;
  ModelOptions opt;
};
// The first is the search's.
const std::array<Method, 3> kMethods{
    {{"features+transfer", {true, true}}, {"features", {true, false}}, {"transfer", {false, true}}}};

// A bucket's candidates: one sample per variant, and the default variant's place among them.
struct Pool {
  Bucket bucket;
  std::vector<std::size_t> samples;
  std::optional<std::size_t> baseline;
};

// problem, device name, arch, tokens, kind
using DefaultKey = std::tuple<std::int64_t, std::string, std::string, int, std::string>;

// The buckets to check: 4 or more candidates, none of them timed by a run
// that times a subset by design (strategy model or random).
std::vector<Pool> pools_of(const Dataset& d, const std::map<DefaultKey, std::int64_t>& defaults,
                           const std::set<std::int64_t>& sampling_runs, const CheckOptions& opt) {
  std::map<Bucket, Pool> by_bucket;
  std::map<Bucket, std::set<std::int64_t>> seen;
  std::set<Bucket> sampled;
  for (std::size_t i = 0; i < d.samples.size(); ++i) {
    const Point& at = d.samples[i].at;
    const Bucket b = bucket_of(at);
    if (!opt.problem_key.empty() && d.problems.at(b.problem_id).key != opt.problem_key) continue;
    if (sampling_runs.contains(d.samples[i].run_id)) sampled.insert(b);
    if (!seen[b].insert(at.variant_id).second) continue;  // another device row of the model: the first one counts
    Pool& p = by_bucket[b];
    p.bucket = b;
    p.samples.push_back(i);
  }
  std::vector<Pool> out;
  for (auto& [b, p] : by_bucket) {
    if (p.samples.size() < opt.min_candidates || sampled.contains(b)) continue;
    const auto def = defaults.find({b.problem_id, d.device_name, d.arch, b.tokens, d.kind});
    for (std::size_t k = 0; def != defaults.end() && k < p.samples.size(); ++k)
      if (d.samples[p.samples[k]].at.variant_id == def->second) p.baseline = k;
    out.push_back(std::move(p));
  }
  return out;
}

struct Eval {
  BucketCheck row;
  bool fitted = false;
  std::vector<char> in_top;
  std::vector<double> top_ratio;
  std::vector<std::size_t> timed;  // samples of d the pick times
};

const std::string& kernel_of(const Dataset& d, std::size_t sample) {
  return d.variants.at(d.samples[sample].at.variant_id).kernel_name;
}

Eval evaluate(const Dataset& d, const Pool& pool, const CostModel* m, const std::string& why, const CheckOptions& opt,
              std::mt19937_64& rng) {
  Eval e;
  const std::size_t n = pool.samples.size();
  std::vector<Point> points;
  std::vector<double> t;
  for (std::size_t s : pool.samples) {
    points.push_back(d.samples[s].at);
    t.push_back(d.samples[s].time_us);
  }
  const std::size_t win = std::size_t(std::min_element(t.begin(), t.end()) - t.begin());
  BucketCheck& r = e.row;
  r.problem_key = d.problems.at(pool.bucket.problem_id).key;
  r.device = fmt::format("{} ({})", d.device_name, d.arch);
  r.kind = d.kind;
  r.tokens = pool.bucket.tokens;
  r.candidates = n;
  r.winner = kernel_of(d, pool.samples[win]);
  auto cost = [&](double us) { return opt.pick.overhead_s + (opt.pick.warmup + opt.pick.reps) * us * 1e-6; };
  if (m) {  // the model's own order, whether or not the pick may use it
    e.fitted = true;
    std::vector<double> pred;
    for (const Point& p : points) pred.push_back(m->predict_us(d, p));
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return pred[a] < pred[b]; });
    r.winner_rank = std::size_t(std::find(order.begin(), order.end(), win) - order.begin()) + 1;
    r.spearman = spearman(pred, t);
    double predicted = 0, measured = 0;
    for (std::size_t k = 0; k < n; ++k) {
      predicted += cost(pred[k]);
      measured += cost(t[k]);
    }
    r.cost_ratio = predicted / measured;
    for (std::size_t top : opt.top_n) {
      double best = t[order[0]];
      for (std::size_t k = 0; k < std::min(top, n); ++k) best = std::min(best, t[order[k]]);
      e.in_top.push_back(r.winner_rank <= top);
      e.top_ratio.push_back(best / t[win]);
    }
  }
  const Pick p = pick(d, m, why, points, pool.baseline, opt.pick, rng);
  r.model_used = !p.everything;
  r.why = p.why;
  r.timed = p.chosen.size();
  double all = 0, spent = 0, best = 0;
  for (double us : t) all += cost(us);
  for (std::size_t k : p.chosen) {
    spent += cost(t[k]);
    if (best == 0 || t[k] < best) {
      best = t[k];
      r.best_timed = kernel_of(d, pool.samples[k]);
    }
    r.winner_timed = r.winner_timed || k == win;
    e.timed.push_back(pool.samples[k]);
  }
  r.best_ratio = best / t[win];
  r.saved = p.everything || all <= 0 ? 0 : 1 - spent / all;
  return e;
}

// The training samples of a bucket's model: leave one bucket out, or what a
// model-guided search would have timed before it (`known`).
std::vector<std::size_t> training(const Dataset& d, const Pool& pool, const std::vector<char>& known, CheckMode mode) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < d.samples.size(); ++i) {
    const Bucket b = bucket_of(d.samples[i].at);
    if (b == pool.bucket) continue;
    if (mode == CheckMode::leave_one_out || b.problem_id != pool.bucket.problem_id || known[i]) out.push_back(i);
  }
  return out;
}

// One method over every pool of a dataset, in the search's order (problems, then ascending T).
std::vector<Eval> run_method(const Dataset& d, const std::vector<Pool>& pools, const Method& method, const CheckOptions& opt) {
  std::vector<char> known(d.samples.size(), 0);
  std::mt19937_64 rng(opt.seed);
  std::vector<Eval> out;
  for (const Pool& pool : pools) {
    const std::vector<std::size_t> train = training(d, pool, known, opt.mode);
    std::optional<CostModel> m;
    std::string why = fmt::format("no {} timings on {} to learn from", d.kind, d.device_name);
    if (!train.empty())
      if (auto fitted = CostModel::fit(d, train, method.opt)) m.emplace(std::move(*fitted));
    Eval e = evaluate(d, pool, m ? &*m : nullptr, why, opt, rng);
    for (std::size_t s : e.timed) known[s] = 1;
    out.push_back(std::move(e));
  }
  return out;
}

void add_to_summary(MethodCheck& mc, const std::vector<Eval>& evals, std::size_t tops) {
  mc.in_top.resize(tops, 0);
  mc.worst_ratio.resize(tops, 1.0);
  for (const Eval& e : evals) {
    if (!e.fitted) continue;
    ++mc.buckets;
    mc.mean_spearman += e.row.spearman;
    for (std::size_t k = 0; k < tops; ++k) {
      mc.in_top[k] += e.in_top[k] ? 1 : 0;
      mc.worst_ratio[k] = std::max(mc.worst_ratio[k], e.top_ratio[k]);
    }
  }
}

Result<std::map<DefaultKey, std::int64_t>> default_variants(db::Store& store) {
  std::map<DefaultKey, std::int64_t> out;
  for (const db::WinnerRow& w : FT_TRY(store.winners()))
    if (w.winner.default_variant_id)
      out[{w.problem.id, w.device.name, w.device.arch, w.winner.tokens, w.winner.kind}] = *w.winner.default_variant_id;
  return out;
}

}  // namespace

Result<CheckReport> check_model(db::Store& store, const CheckOptions& opt) {
  CheckReport rep;
  rep.mode = opt.mode;
  rep.top_n = opt.top_n;
  for (const Method& m : kMethods) rep.methods.push_back({m.name, 0, {}, {}, 0});
  const auto defaults = FT_TRY(default_variants(store));
  std::set<std::int64_t> sampling_runs;
  for (const db::RunRecord& r : FT_TRY(store.list_runs()))
    if (r.strategy == "model" || r.strategy == "random") sampling_runs.insert(r.id);
  std::set<std::string> kinds;
  for (const db::VariantCount& c : FT_TRY(store.variant_counts()))
    if (opt.kind.empty() || c.kind == opt.kind) kinds.insert(c.kind);
  std::set<std::pair<std::string, std::string>> models;
  std::vector<db::DeviceRecord> devices;
  for (const db::DeviceRecord& dev : FT_TRY(store.devices()))
    if (dev.runtime != "none" && models.insert({dev.name, dev.arch}).second) devices.push_back(dev);
  for (const db::DeviceRecord& dev : devices) {
    bool any = false;
    for (const std::string& kind : kinds) {
      Dataset d = FT_TRY(load_dataset(store, kind, dev));
      compute_features(d);  // once for the many fits below
      std::vector<Pool> pools = pools_of(d, defaults, sampling_runs, opt);
      if (pools.empty()) continue;
      any = true;
      for (std::size_t k = 0; k < kMethods.size(); ++k) {
        std::vector<Eval> evals = run_method(d, pools, kMethods[k], opt);
        add_to_summary(rep.methods[k], evals, opt.top_n.size());
        if (k == 0)
          for (Eval& e : evals) rep.buckets.push_back(std::move(e.row));
      }
    }
    if (any) rep.devices.push_back(fmt::format("{} ({})", dev.name, dev.arch));
  }
  for (MethodCheck& mc : rep.methods)
    if (mc.buckets) mc.mean_spearman /= double(mc.buckets);
  return rep;
}

}  // namespace ft::model
