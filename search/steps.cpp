#include "search/steps.hpp"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "layer/operation.hpp"
#include "layer/program.hpp"
#include "measure/layer_bench.hpp"
#include "search/model_pick.hpp"
#include "search/progress.hpp"
#include "store/kind.hpp"
#include "store/layer_record.hpp"

namespace ft {
namespace {

// The step's side of a strategy: timings of candidates at one token count on
// one device, resumed from the store where allowed, each one recorded.
class BucketTimer final : public StageTimer {
 public:
  BucketTimer(const SearchConfig& cfg, GpuContext& gpu, int tokens, const TelemetryReading& tele, Progress* bar = nullptr,
              std::size_t pool = 0)
      : cfg_(cfg), gpu_(gpu), tokens_(tokens), tele_(tele), bar_(bar), pool_(pool) {}

  std::optional<double> time(const Candidate& c, std::string_view phase, int reps) override {
    if (auto resumed = from_store(c, phase)) return resumed;
    if (gpu_.m.stopped()) return std::nullopt;
    protocol::TimeRequest req{c.kernel};
    req.reps = reps;
    auto r = gpu_.m.time(req);
    if (!r) {
      (void)gpu_.record(c.id, tokens_, phase, status_of(r.error()), {}, r.error().describe(), tele_);
      return std::nullopt;
    }
    (void)gpu_.record(c.id, tokens_, phase, db::MeasurementStatus::ok, {*r, {}}, "", tele_);
    return r->median_us;
  }

  void interleaved(Ranked& best, int rounds, int reps) override;

  Status read_store(const std::function<Status(db::Store&)>& read) override { return gpu_.rec.read(read); }

  void note(const std::string& line) override {
    gpu_.rec.note(line);
    if (cfg_.progress) fmt::print(stderr, "{}{}\n", label_.empty() ? "" : label_ + ": ", line);
  }
  // The device's name in progress lines when several search side by side.
  void name_device(std::string label) { label_ = std::move(label); }

  std::vector<db::MeasurementRecord> earlier(const Candidate& c) override {
    db::MeasurementFilter f;
    f.variant_id = c.id;
    f.problem_id = gpu_.problem_id;
    f.device_id = gpu_.device_id;
    auto rows = gpu_.rec.measurements(f);
    return rows ? std::move(*rows) : std::vector<db::MeasurementRecord>{};
  }

  void screened(const Candidate& c) override {
    if (!bar_) return;
    bar_->advance(c.cv->variant.name());
    if (++screened_ == pool_) bar_->finish();
  }

  bool stopped() const override { return gpu_.m.stopped(); }

 private:
  // A timing the store holds as good as the one asked for (a long or an A/B
  // one serves for a short one), unless --force.
  std::optional<double> from_store(const Candidate& c, std::string_view phase) {
    if (cfg_.force) return std::nullopt;
    auto prev = gpu_.rec.latest({c.id, gpu_.problem_id, gpu_.device_id, tokens_});
    if (!prev || !*prev) return std::nullopt;
    const db::MeasurementRecord& m = **prev;
    if (m.status != db::MeasurementStatus::ok || !m.median_us) return std::nullopt;
    if (m.phase != phase && m.phase != "ab" && !(m.phase == "long" && phase == "short")) return std::nullopt;
    gpu_.rec.resumed();
    return *m.median_us;
  }

  const SearchConfig& cfg_;
  GpuContext& gpu_;
  int tokens_;
  const TelemetryReading& tele_;
  Progress* bar_;
  std::size_t pool_, screened_ = 0;
  std::string label_;
};

void BucketTimer::interleaved(Ranked& best, int rounds, int reps) {
  std::vector<std::vector<double>> medians(best.size());
  for (int round = 0; round < rounds; ++round)
    for (std::size_t j = 0; j < best.size(); ++j) {
      if (gpu_.m.stopped()) return;
      const std::size_t k = (j + std::size_t(round)) % best.size();
      protocol::TimeRequest req{best[k].second->kernel};
      req.reps = reps;
      auto r = gpu_.m.time(req);
      if (!r) continue;
      medians[k].push_back(r->median_us);
      if (round != rounds - 1) continue;
      // One measurement: the median of the rounds' medians with their
      // spread, so the winner's median lies inside its p10-p90.
      std::vector<double> v = medians[k];
      std::sort(v.begin(), v.end());
      Timing t = *r;
      t.median_us = v[v.size() / 2];
      t.p10_us = v.front();
      t.p90_us = v.back();
      (void)gpu_.record(best[k].second->id, tokens_, "ab", db::MeasurementStatus::ok, {t, {}}, "", tele_);
    }
  for (std::size_t k = 0; k < best.size(); ++k)
    if (!medians[k].empty()) {
      std::sort(medians[k].begin(), medians[k].end());
      best[k].first = medians[k][medians[k].size() / 2];
    }
}

// The forward layer of two stage candidates, as the measuring service's program requests name it.
protocol::ProgramKernels layer_program(const Candidate& stage1, const Candidate& stage2) {
  return {&op::moe_forward(), {stage1.kernel, stage2.kernel}, {}};
}

}  // namespace

Result<const Target*> target_of_gpu(const SearchConfig& cfg, const DeviceInfo& info) {
  const Target* target = find_target(info.arch);
  if (!target)
    return fail(Errc::invalid_input, fmt::format("the GPU {} is {}, which flytune has no target for", info.name, info.arch));
  if (!cfg.targets.empty() && std::find(cfg.targets.begin(), cfg.targets.end(), std::string(target->name)) == cfg.targets.end())
    return fail(Errc::invalid_input, fmt::format("--target {} does not match the GPU {} ({}); drop --target or use --dry-run",
                                                 cfg.targets.front(), info.name, info.arch));
  return target;
}

db::MeasurementStatus status_of(const Error& e) {
  switch (e.code) {
    case Errc::timeout: return db::MeasurementStatus::timeout;
    case Errc::verify: return db::MeasurementStatus::verify_failed;
    default: return db::MeasurementStatus::launch_error;
  }
}

db::MeasurementRecord measurement_row(const db::MeasurementKey& key, std::int64_t run_id, std::string_view phase,
                                      db::MeasurementStatus st, const Measured& result, const std::string& error,
                                      const TelemetryReading& tele) {
  db::MeasurementRecord mr;
  mr.run_id = run_id;
  mr.variant_id = key.variant_id;
  mr.problem_id = key.problem_id;
  mr.device_id = key.device_id;
  mr.tokens = key.tokens;
  mr.phase = std::string(phase);
  mr.status = st;
  mr.error_message = error;
  if (const auto& t = result.timing) {
    mr.median_us = t->median_us;
    mr.p10_us = t->p10_us;
    mr.p90_us = t->p90_us;
    mr.min_us = t->min_us;
    mr.samples = t->samples;
  }
  if (const auto& c = result.comparison) {
    mr.rel_l2_err = c->rel_l2;
    mr.max_abs_err = c->max_abs;
  }
  mr.sm_clock_mhz = tele.sm_clock_mhz;
  mr.mem_clock_mhz = tele.memory_clock_mhz;
  mr.temperature_c = tele.temperature_c;
  return mr;
}

Status GpuContext::record(std::int64_t variant_id, int tokens, std::string_view phase, db::MeasurementStatus st,
                          const Measured& result, const std::string& error, const TelemetryReading& tele) {
  db::MeasurementRecord mr = measurement_row({variant_id, problem_id, device_id, tokens}, run_id, phase, st, result, error, tele);
  mr.pci_bus_id = info.pci_bus_id;
  return rec.measurement(mr);
}

Result<std::optional<VerifyOutcome>> verify_one(const SearchConfig& cfg, GpuContext& gpu, const Candidate& c) {
  if (!cfg.force) {
    auto prev = FT_TRY(gpu.rec.latest({c.id, gpu.problem_id, gpu.device_id, cfg.verify_tokens}));
    if (prev && prev->phase == "verify") {
      gpu.rec.resumed();
      return prev->status == db::MeasurementStatus::ok ? VerifyOutcome::passed : VerifyOutcome::failed;
    }
  }
  if (gpu.m.stopped()) return std::nullopt;
  auto r = gpu.m.verify({c.kernel});
  if (!r) {
    FT_CHECK(gpu.record(c.id, cfg.verify_tokens, "verify", status_of(r.error()), {}, r.error().describe(), {}));
    return VerifyOutcome::crashed;
  }
  if (!r->passed) {
    FT_CHECK(gpu.record(c.id, cfg.verify_tokens, "verify", db::MeasurementStatus::verify_failed, {{}, *r}, r->summary, {}));
    return VerifyOutcome::failed;
  }
  FT_CHECK(gpu.record(c.id, cfg.verify_tokens, "verify", db::MeasurementStatus::ok, {{}, *r}, "", {}));
  return VerifyOutcome::passed;
}

Result<std::optional<Ranked>> StageStep::rank(Strategy& strategy, StageRole kind, int tokens,
                                              const TelemetryReading& tele) {
  std::vector<const Candidate*> pool;
  for (const Candidate& c : candidates)
    if (c.cv->variant.role == kind) pool.push_back(&c);
  if (pool.empty()) return Ranked{};
  // Beside other devices' bars: named by the device, one line per tenth rather than a redrawn line.
  Progress bar(fmt::format("{}T={} {}", many_gpus ? gpu.m.label() + " " : "", tokens, to_string(kind)), pool.size(),
               cfg.progress, many_gpus ? Progress::Mode::lines : Progress::Mode::automatic);
  BucketTimer timer(cfg, gpu, tokens, tele, &bar, pool.size());
  if (many_gpus) timer.name_device(gpu.m.label());
  StageQuery q{kind, tokens, &rng, gpu.problem_id, gpu.device_id, nullptr};
  if (auto d = default_variant(target, cfg.problem, kind))
    for (const Candidate* c : pool)
      if (c->cv->variant.name() == d->name()) q.baseline = c;
  return strategy.rank(pool, q, timer);
}

Status StageStep::record_winner(StageRole kind, int tokens, const Ranked& timed, const TelemetryReading& tele) {
  const Candidate& win = *timed.front().second;
  std::optional<double> speedup;
  std::optional<std::int64_t> default_id;
  if (auto d = default_variant(target, cfg.problem, kind)) {
    auto it = std::find_if(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.cv->variant.name() == d->name(); });
    if (it != candidates.end()) {
      default_id = it->id;
      BucketTimer timer(cfg, gpu, tokens, tele);
      if (auto dt = timer.time(*it, "long", kLongReps)) speedup = *dt / timed.front().first;
    }
  }
  auto prev = gpu.rec.latest({win.id, gpu.problem_id, gpu.device_id, tokens});
  db::WinnerRecord w;
  w.problem_id = gpu.problem_id;
  w.device_id = gpu.device_id;
  w.tokens = tokens;
  w.kind = db::kind_text(db::kind_of(kind));
  w.variant_id = win.id;
  w.run_id = gpu.run_id;
  w.median_us = timed.front().first;
  if (prev && *prev) {
    w.p10_us = (*prev)->p10_us;
    w.p90_us = (*prev)->p90_us;
  }
  w.default_variant_id = default_id;
  w.speedup_vs_default = speedup;
  return gpu.rec.winner(w, {tokens, w.kind, win.cv->variant.name(), w.median_us, w.p10_us.value_or(0), w.p90_us.value_or(0),
                            std::nullopt, speedup, {}});
}

LayerPairs layer_pairs(const Target& target, const Problem& problem, const Ranked& s1, const Ranked& s2) {
  constexpr std::size_t kTopPerStage = 5, kPairs = 9;
  LayerPairs out;
  std::vector<std::tuple<double, std::size_t, std::size_t, bool>> all;  // (summed time, index in s1, in s2, a class's best)
  auto fits = [&](std::size_t i, std::size_t j) {
    auto st = pair_fits(target, problem, s1[i].second->cv->variant, s2[j].second->cv->variant);
    if (!st) out.skipped = st.error().message;
    return st.has_value();
  };
  auto add = [&](std::size_t i, std::size_t j, bool best_of_class) {
    for (auto& [t, a, b, kept] : all)
      if (a == i && b == j) {
        kept = kept || best_of_class;
        return;
      }
    all.emplace_back(s1[i].first + s2[j].first, i, j, best_of_class);
  };
  for (std::size_t i = 0; i < std::min(kTopPerStage, s1.size()); ++i)
    for (std::size_t j = 0; j < std::min(kTopPerStage, s2.size()); ++j)
      if (fits(i, j)) add(i, j, false);
  // The best of each row-block class of one stage with the best of the other
  // stage that fits it (the first of each list that does: they are fastest first).
  // (A one-launch stage's class is its family too: its best is paired with its twin.)
  auto class_of = [](const Candidate* c) {
    const StageContract k = c->cv->variant.contract();
    return std::tuple{k.rows_per_tile, k.weight_in_stage1, writes_y(k.output), k.whole_layer};
  };
  auto best_of_each_class = [&](const Ranked& r) {
    std::vector<std::size_t> firsts;
    for (std::size_t i = 0; i < r.size(); ++i)
      if (std::none_of(firsts.begin(), firsts.end(), [&](std::size_t f) { return class_of(r[f].second) == class_of(r[i].second); }))
        firsts.push_back(i);
    return firsts;
  };
  for (std::size_t i : best_of_each_class(s1))
    for (std::size_t j = 0; j < s2.size(); ++j)
      if (fits(i, j)) {
        add(i, j, true);
        break;
      }
  for (std::size_t j : best_of_each_class(s2))
    for (std::size_t i = 0; i < s1.size(); ++i)
      if (fits(i, j)) {
        add(i, j, true);
        break;
      }
  std::stable_sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
  // Every class's best pair is timed; the fastest others fill the nine.
  const std::size_t kept = std::size_t(std::count_if(all.begin(), all.end(), [](const auto& x) { return std::get<3>(x); }));
  std::size_t others = 0;
  for (const auto& [t, i, j, best_of_class] : all)
    if (best_of_class || others++ + kept < kPairs) out.pairs.emplace_back(s1[i].second, s2[j].second);
  return out;
}

Result<bool> LayerStep::run(int tokens, const Ranked& s1, const Ranked& s2, const TelemetryReading& tele) {
  std::string why;
  if (s1.empty() || s2.empty()) {
    no_layer(tokens, s1.empty() ? "no stage-1 variant was timed" : "no stage-2 variant was timed");
    return true;
  }
  const LayerPairs pairs = layer_pairs(target, cfg.problem, s1, s2);
  if (pairs.pairs.empty()) {
    no_layer(tokens, fmt::format("no timed stage-1 variant fits any timed stage-2 variant ({} and {} timed): {}", s1.size(),
                                 s2.size(), pairs.skipped));
    return true;
  }
  std::vector<std::tuple<double, const Candidate*, const Candidate*>> paired;
  for (const auto& [a, b] : pairs.pairs) {
    if (gpu.m.stopped()) return false;
    protocol::TimeProgramRequest probe{layer_program(*a, *b)};
    probe.reps = kAbReps;
    probe.graph = cfg.graph;
    auto t = gpu.m.time_program(probe);
    if (!t) {
      why = fmt::format("timing {} + {} failed: {}", a->cv->variant.name(), b->cv->variant.name(), t.error().describe());
      continue;
    }
    paired.emplace_back(t->total.median_us, a, b);
  }
  if (gpu.m.stopped()) return false;
  std::stable_sort(paired.begin(), paired.end(), [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
  if (paired.empty()) {
    no_layer(tokens, why.empty() ? "no stage pair could be timed" : why);
    return true;
  }
  constexpr std::size_t kVerifyTries = 3;
  for (std::size_t pi = 0; pi < std::min(kVerifyTries, paired.size()); ++pi) {
    if (gpu.m.stopped()) return false;
    if (FT_TRY(try_pair(tokens, std::get<1>(paired[pi]), std::get<2>(paired[pi]), tele, why))) return true;
  }
  if (gpu.m.stopped()) return false;
  no_layer(tokens, why);
  return true;
}

void LayerStep::no_layer(int tokens, const std::string& reason) {
  gpu.rec.missing_layer({tokens, gpu.info.name, reason});
  if (cfg.progress) fmt::print(stderr, "{}T={}: no layer winner: {}\n", gpu_prefix(), tokens, reason);
}

// Verifies the pair at this T, then times it at length and records it as
// the bucket's layer winner; false (and why) when it fails either.
Result<bool> LayerStep::try_pair(int tokens, const Candidate* c1, const Candidate* c2, const TelemetryReading& tele,
                                 std::string& why) {
  db::VariantRecord layer;
  const db::LayerRecord pair = db::LayerRecord::of(c1->cv->variant, c2->cv->variant);
  layer.kernel_name = pair.kernel_name();
  layer.target = std::string(target.name);
  layer.kind = db::kind_text(db::Kind::layer);
  layer.params = pair.to_params();
  layer.toolchain_id = gpu.toolchain_id;
  const std::int64_t layer_id = FT_TRY(gpu.rec.variant(layer));
  auto v = gpu.m.verify_program({layer_program(*c1, *c2)});
  if (!v || !v->passed) {
    const std::string message = v ? v->summary : v.error().describe();
    (void)gpu.record(layer_id, tokens, "verify", v ? db::MeasurementStatus::verify_failed : status_of(v.error()),
                     {{}, v ? std::optional(*v) : std::nullopt}, message, tele);
    why = fmt::format("{} failed verification at T={}: {}", layer.kernel_name, tokens, message);
    if (cfg.progress) fmt::print(stderr, "{}T={}: {}\n", gpu_prefix(), tokens, why);
    return false;
  }
  protocol::TimeProgramRequest req{layer_program(*c1, *c2)};
  req.reps = kLongReps;
  req.graph = cfg.graph;
  auto t = gpu.m.time_program(req);
  if (!t) {
    (void)gpu.record(layer_id, tokens, "layer", status_of(t.error()), {}, t.error().describe(), tele);
    why = fmt::format("timing {} failed: {}", layer.kernel_name, t.error().describe());
    return false;
  }
  FT_CHECK(gpu.record(layer_id, tokens, "layer", db::MeasurementStatus::ok, {t->total, *v}, "", tele));
  db::WinnerRecord w;
  w.problem_id = gpu.problem_id;
  w.device_id = gpu.device_id;
  w.tokens = tokens;
  w.kind = layer.kind;
  w.variant_id = layer_id;
  w.run_id = gpu.run_id;
  w.median_us = t->total.median_us;
  w.p10_us = t->total.p10_us;
  w.p90_us = t->total.p90_us;
  nlohmann::json breakdown = nlohmann::json::object();  // align_us, stage1_us, stage2_us, reduce_us
  for (const auto& [name, part] : t->parts) breakdown[name + "_us"] = part.median_us;
  BucketResult br{tokens,       layer.kind,   layer.kernel_name, w.median_us, *w.p10_us, *w.p90_us,
                  std::nullopt, std::nullopt, std::move(breakdown)};
  if (ceilings) br.floor_us = roofline_floor_us(cfg.problem, tokens, *ceilings);
  FT_CHECK(gpu.rec.winner(w, std::move(br)));
  return true;
}

}  // namespace ft
