#include "tuner/search/steps.hpp"

#include <algorithm>
#include <chrono>
#include <tuple>

#include <fmt/format.h>

#include "layer/program.hpp"
#include "tuner/layer/layer_bench.hpp"
#include "tuner/search/model_pick.hpp"
#include "tuner/search/progress.hpp"

namespace ft {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kShortReps = 5, kLongReps = 30, kAbReps = 10, kAbRounds = 3;

// Interleaved A/B rounds of the best few candidates (A, B, C, B, C, A, ...),
// so drift hits all of them alike. Each candidate's time becomes the median of
// its rounds' medians, recorded once (phase "ab") with the rounds' spread.
void ab_rounds(GpuContext& gpu, Ranked& timed, int tokens, const nlohmann::json& tele) {
  std::vector<std::vector<double>> rounds(timed.size());
  for (int round = 0; round < kAbRounds; ++round)
    for (std::size_t j = 0; j < timed.size(); ++j) {
      if (gpu.m.stopped()) return;
      const std::size_t k = (j + std::size_t(round)) % timed.size();
      nlohmann::json req = timed[k].second->spec;
      req["op"] = "time";
      req["reps"] = kAbReps;
      if (auto r = gpu.m.call(req, 120s)) {
        rounds[k].push_back((*r)["median_us"].get<double>());
        if (round == kAbRounds - 1) {
          nlohmann::json res = *r;
          std::vector<double> v = rounds[k];
          std::sort(v.begin(), v.end());
          // One measurement: the median of the rounds' medians with their
          // spread, so the winner's median lies inside its p10-p90.
          res["median_us"] = v[v.size() / 2];
          res["p10_us"] = v.front();
          res["p90_us"] = v.back();
          (void)gpu.record(timed[k].second->id, tokens, "ab", db::MeasurementStatus::ok, res, "", tele);
        }
      }
    }
  for (std::size_t k = 0; k < timed.size(); ++k)
    if (!rounds[k].empty()) {
      std::sort(rounds[k].begin(), rounds[k].end());
      timed[k].first = rounds[k][rounds[k].size() / 2];
    }
}

}  // namespace

db::MeasurementStatus status_of(const Error& e) {
  switch (e.code) {
    case Errc::timeout: return db::MeasurementStatus::timeout;
    case Errc::verify: return db::MeasurementStatus::verify_failed;
    default: return db::MeasurementStatus::launch_error;
  }
}

Status GpuContext::record(std::int64_t variant_id, int tokens, const std::string& phase, db::MeasurementStatus st,
                          const nlohmann::json& result, const std::string& error, const nlohmann::json& tele) {
  db::MeasurementRecord mr;
  mr.run_id = run_id;
  mr.variant_id = variant_id;
  mr.problem_id = problem_id;
  mr.device_id = device_id;
  mr.tokens = tokens;
  mr.phase = phase;
  mr.status = st;
  mr.error_message = error;
  mr.pci_bus_id = info.pci_bus_id;
  if (result.contains("median_us")) {
    mr.median_us = result["median_us"].get<double>();
    mr.p10_us = result["p10_us"].get<double>();
    mr.p90_us = result["p90_us"].get<double>();
    mr.min_us = result["min_us"].get<double>();
    mr.samples = result["samples"].get<int>();
  }
  if (result.contains("rel_l2")) {
    mr.rel_l2_err = result["rel_l2"].get<double>();
    mr.max_abs_err = result["max_abs"].get<double>();
  }
  if (tele.contains("sm_clock_mhz")) mr.sm_clock_mhz = tele["sm_clock_mhz"].get<int>();
  if (tele.contains("mem_clock_mhz")) mr.mem_clock_mhz = tele["mem_clock_mhz"].get<int>();
  if (tele.contains("temperature_c")) mr.temperature_c = tele["temperature_c"].get<double>();
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
  nlohmann::json req = c.spec;
  req["op"] = "verify";
  auto r = gpu.m.call(req, 120s);
  if (!r) {
    FT_CHECK(gpu.record(c.id, cfg.verify_tokens, "verify", status_of(r.error()), {}, r.error().describe(), {}));
    return VerifyOutcome::crashed;
  }
  if (!(*r)["passed"].get<bool>()) {
    FT_CHECK(gpu.record(c.id, cfg.verify_tokens, "verify", db::MeasurementStatus::verify_failed, *r,
                        (*r)["summary"].get<std::string>(), {}));
    return VerifyOutcome::failed;
  }
  FT_CHECK(gpu.record(c.id, cfg.verify_tokens, "verify", db::MeasurementStatus::ok, *r, "", {}));
  return VerifyOutcome::passed;
}

Result<std::optional<Ranked>> StageStep::rank(KernelKind kind, int tokens, const nlohmann::json& tele) {
  std::vector<const Candidate*> pool;
  for (const Candidate& c : candidates)
    if (c.cv->variant.kind == kind) pool.push_back(&c);
  Ranked timed;
  if (pool.empty()) return timed;
  if (cfg.strategy == Strategy::model) pool = FT_TRY(model_pool(kind, tokens, std::move(pool)));
  // Beside other GPUs' bars: named by the GPU, one line per tenth rather than a redrawn line.
  Progress bar(fmt::format("{}T={} {}", many_gpus ? gpu.m.label() + " " : "", tokens, to_string(kind)), pool.size(),
               cfg.progress, many_gpus ? Progress::Mode::lines : Progress::Mode::automatic);
  const auto bucket_start = Clock::now();
  if (cfg.strategy == Strategy::random) std::shuffle(pool.begin(), pool.end(), rng);
  const std::size_t budget = cfg.strategy == Strategy::random && cfg.budget > 0 ? std::size_t(cfg.budget) : pool.size();
  const bool halving = cfg.strategy == Strategy::halving || cfg.strategy == Strategy::model;
  const int reps = halving ? kShortReps : kLongReps;
  const std::string phase = halving ? "short" : "long";
  for (std::size_t i = 0; i < pool.size() && i < budget; ++i) {
    if (gpu.m.stopped()) return std::nullopt;
    if (cfg.strategy == Strategy::random && cfg.time_limit_s > 0 &&
        std::chrono::duration<double>(Clock::now() - bucket_start).count() > cfg.time_limit_s)
      break;
    if (auto t = time_one(*pool[i], phase, reps, tokens, tele)) timed.emplace_back(*t, pool[i]);
    bar.advance(pool[i]->cv->variant.name());
  }
  bar.finish();
  auto by_time = [](auto& a, auto& b) { return a.first < b.first; };
  std::sort(timed.begin(), timed.end(), by_time);
  if (halving && timed.size() > 1) {
    // Longer measurement of the best quarter, then interleaved A/B rounds of the top three.
    timed.resize(std::max<std::size_t>(2, (timed.size() + 3) / 4));
    for (auto& [t, c] : timed)
      if (auto lt = time_one(*c, "long", kLongReps, tokens, tele)) t = *lt;
    if (gpu.m.stopped()) return std::nullopt;
    std::sort(timed.begin(), timed.end(), by_time);
    timed.resize(std::min<std::size_t>(3, timed.size()));
    ab_rounds(gpu, timed, tokens, tele);
    if (gpu.m.stopped()) return std::nullopt;
    std::sort(timed.begin(), timed.end(), by_time);
  }
  return timed;
}

// The candidates the cost model picks (model_pick.hpp), or all of them where
// it cannot be trusted yet; what it did goes to the search's notes.
Result<std::vector<const Candidate*>> StageStep::model_pool(KernelKind kind, int tokens, std::vector<const Candidate*> pool) {
  std::vector<std::int64_t> ids;
  std::optional<std::size_t> baseline;
  const Result<Variant> def = default_variant(target, cfg.problem, kind);
  for (std::size_t i = 0; i < pool.size(); ++i) {
    ids.push_back(pool[i]->id);
    if (def && pool[i]->cv->variant.name() == def->name()) baseline = i;
  }
  model::PickOptions opt;
  opt.budget_s = cfg.model_budget_s;
  opt.explore = std::size_t(std::max(0, cfg.model_explore));
  opt.warmup = TimingOptions{}.warmup;
  opt.reps = kShortReps;
  model::Dataset data;  // read between the search's writes; fitted outside them
  FT_CHECK(gpu.rec.read([&](db::Store& store) -> Status {
    data = FT_TRY(model::load_for_bucket(store, to_string(kind), gpu.problem_id, gpu.device_id, tokens));
    return {};
  }));
  const model::Pick pick = model::pick_for_bucket(data, gpu.problem_id, gpu.device_id, tokens, ids, baseline, opt, rng);
  const std::string line = fmt::format("T={} {}: {}", tokens, to_string(kind), pick.why);
  gpu.rec.note(line);
  if (cfg.progress) fmt::print(stderr, "{}{}\n", many_gpus ? gpu.m.label() + ": " : "", line);
  std::vector<const Candidate*> out;
  for (std::size_t i : pick.chosen) out.push_back(pool[i]);
  return out;
}

Status StageStep::record_winner(KernelKind kind, int tokens, const Ranked& timed, const nlohmann::json& tele) {
  const Candidate& win = *timed.front().second;
  std::optional<double> speedup;
  std::optional<std::int64_t> default_id;
  if (auto d = default_variant(target, cfg.problem, kind)) {
    auto it = std::find_if(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.cv->variant.name() == d->name(); });
    if (it != candidates.end()) {
      default_id = it->id;
      if (auto dt = time_one(*it, "long", kLongReps, tokens, tele)) speedup = *dt / timed.front().first;
    }
  }
  auto prev = gpu.rec.latest({win.id, gpu.problem_id, gpu.device_id, tokens});
  db::WinnerRecord w;
  w.problem_id = gpu.problem_id;
  w.device_id = gpu.device_id;
  w.tokens = tokens;
  w.kind = std::string(to_string(kind));
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

// One timing of one candidate, resumed from the store when allowed.
std::optional<double> StageStep::time_one(const Candidate& c, const std::string& phase, int reps, int tokens,
                                          const nlohmann::json& tele) {
  if (!cfg.force) {
    auto prev = gpu.rec.latest({c.id, gpu.problem_id, gpu.device_id, tokens});
    if (prev && *prev && (*prev)->status == db::MeasurementStatus::ok && (*prev)->median_us &&
        ((*prev)->phase == phase || (*prev)->phase == "ab" || ((*prev)->phase == "long" && phase == "short"))) {
      gpu.rec.resumed();
      return *(*prev)->median_us;
    }
  }
  if (gpu.m.stopped()) return std::nullopt;
  nlohmann::json req = c.spec;
  req["op"] = "time";
  req["reps"] = reps;
  auto r = gpu.m.call(req, 120s);
  if (!r) {
    (void)gpu.record(c.id, tokens, phase, status_of(r.error()), {}, r.error().describe(), tele);
    return std::nullopt;
  }
  (void)gpu.record(c.id, tokens, phase, db::MeasurementStatus::ok, *r, "", tele);
  return (*r)["median_us"].get<double>();
}

std::vector<std::pair<const Candidate*, const Candidate*>> layer_pairs(const Target& target, const Problem& problem,
                                                                       const Ranked& s1, const Ranked& s2,
                                                                       std::string& skipped) {
  constexpr std::size_t kTopPerStage = 5, kPairs = 9;
  std::vector<std::tuple<double, const Candidate*, const Candidate*>> all;
  for (std::size_t i = 0; i < std::min(kTopPerStage, s1.size()); ++i)
    for (std::size_t j = 0; j < std::min(kTopPerStage, s2.size()); ++j) {
      const Variant &a = s1[i].second->cv->variant, &b = s2[j].second->cv->variant;
      if (a.weight_in_stage1 != b.weight_in_stage1) continue;
      if (auto block = align_block_of(LayerRecipe{&target, problem, a, b}); !block) {
        skipped = block.error().message;
        continue;
      }
      all.emplace_back(s1[i].first + s2[j].first, s1[i].second, s2[j].second);
    }
  std::sort(all.begin(), all.end(), [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
  std::vector<std::pair<const Candidate*, const Candidate*>> out;
  for (const auto& [t, a, b] : all)
    if (out.size() < kPairs) out.emplace_back(a, b);
  return out;
}

Result<bool> LayerStep::run(int tokens, const Ranked& s1, const Ranked& s2, const nlohmann::json& tele) {
  std::string why;
  if (s1.empty() || s2.empty()) {
    no_layer(tokens, s1.empty() ? "no stage-1 variant was timed" : "no stage-2 variant was timed");
    return true;
  }
  std::vector<std::tuple<double, const Candidate*, const Candidate*>> paired;
  for (const auto& [a, b] : layer_pairs(target, cfg.problem, s1, s2, why)) {
    if (gpu.m.stopped()) return false;
    nlohmann::json probe{{"op", "time_layer"}, {"stage1", a->spec}, {"stage2", b->spec}, {"reps", kAbReps}, {"graph", cfg.graph}};
    auto t = gpu.m.call(probe, 300s);
    if (!t) {
      why = fmt::format("timing {} + {} failed: {}", a->cv->variant.name(), b->cv->variant.name(), t.error().describe());
      continue;
    }
    paired.emplace_back((*t)["total"]["median_us"].get<double>(), a, b);
  }
  if (gpu.m.stopped()) return false;
  std::sort(paired.begin(), paired.end(), [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
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
  gpu.rec.note(fmt::format("T={}: no layer winner: {}", tokens, reason));
  if (cfg.progress) fmt::print(stderr, "{}T={}: no layer winner: {}\n", gpu_prefix(), tokens, reason);
}

// Verifies the pair at this T, then times it at length and records it as
// the bucket's layer winner; false (and why) when it fails either.
Result<bool> LayerStep::try_pair(int tokens, const Candidate* c1, const Candidate* c2, const nlohmann::json& tele,
                                 std::string& why) {
  db::VariantRecord layer;
  layer.kernel_name = c1->cv->variant.name() + "+" + c2->cv->variant.name();
  layer.target = std::string(target.name);
  layer.kind = "layer";
  layer.params = {{"stage1", c1->cv->variant.to_json()}, {"stage2", c2->cv->variant.to_json()},
                  {"stage1_kernel", c1->cv->variant.name()}, {"stage2_kernel", c2->cv->variant.name()}};
  layer.toolchain_id = gpu.toolchain_id;
  const std::int64_t layer_id = FT_TRY(gpu.rec.variant(layer));
  nlohmann::json req{{"stage1", c1->spec}, {"stage2", c2->spec}};
  req["op"] = "verify_layer";
  auto v = gpu.m.call(req, 600s);
  if (!v || !(*v)["passed"].get<bool>()) {
    const std::string message = v ? (*v)["summary"].get<std::string>() : v.error().describe();
    (void)gpu.record(layer_id, tokens, "verify", v ? db::MeasurementStatus::verify_failed : status_of(v.error()),
                     v ? *v : nlohmann::json{}, message, tele);
    why = fmt::format("{} failed verification at T={}: {}", layer.kernel_name, tokens, message);
    if (cfg.progress) fmt::print(stderr, "{}T={}: {}\n", gpu_prefix(), tokens, why);
    return false;
  }
  req["op"] = "time_layer";
  req["reps"] = kLongReps;
  req["graph"] = cfg.graph;
  auto t = gpu.m.call(req, 300s);
  if (!t) {
    (void)gpu.record(layer_id, tokens, "layer", status_of(t.error()), {}, t.error().describe(), tele);
    why = fmt::format("timing {} failed: {}", layer.kernel_name, t.error().describe());
    return false;
  }
  nlohmann::json total = (*t)["total"];
  total["rel_l2"] = (*v)["rel_l2"];
  total["max_abs"] = (*v)["max_abs"];
  FT_CHECK(gpu.record(layer_id, tokens, "layer", db::MeasurementStatus::ok, total, "", tele));
  db::WinnerRecord w;
  w.problem_id = gpu.problem_id;
  w.device_id = gpu.device_id;
  w.tokens = tokens;
  w.kind = "layer";
  w.variant_id = layer_id;
  w.run_id = gpu.run_id;
  w.median_us = total["median_us"].get<double>();
  w.p10_us = total["p10_us"].get<double>();
  w.p90_us = total["p90_us"].get<double>();
  BucketResult br{tokens, "layer", layer.kernel_name, w.median_us, *w.p10_us, *w.p90_us, std::nullopt, std::nullopt,
                  nlohmann::json{{"align_us", (*t)["align"]["median_us"]}, {"stage1_us", (*t)["stage1"]["median_us"]},
                                 {"stage2_us", (*t)["stage2"]["median_us"]}, {"reduce_us", (*t)["reduce"]["median_us"]}}};
  if (ceilings) br.floor_us = roofline_floor_us(cfg.problem, tokens, *ceilings);
  FT_CHECK(gpu.rec.winner(w, std::move(br)));
  return true;
}

}  // namespace ft
