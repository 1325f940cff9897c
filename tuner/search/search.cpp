#include "tuner/search/search.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <tuple>

#include <fmt/format.h>

#include "db/store.hpp"
#include "generator/emitter.hpp"
#include "layer/program.hpp"
#include "tuner/search/compile_space.hpp"
#include "tuner/search/progress.hpp"
#include "tuner/subprocess.hpp"
#include "tuner/worker/worker_process.hpp"

namespace ft {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr int kShortReps = 5, kLongReps = 30, kAbReps = 10, kAbRounds = 3;

db::Resources to_db(const Resources& r) {
  db::Resources out;
  out.vgprs = r.vgprs;
  out.agprs = r.agprs;
  out.sgprs = r.sgprs;
  out.regs = r.regs;
  out.lds_bytes = r.lds_bytes;
  out.scratch_bytes = r.scratch_bytes;
  out.spills = r.spill_bytes;
  out.occupancy = r.occupancy;
  return out;
}

// A fresh seed when none is given: the clock mixed with the process id.
std::uint64_t fresh_seed() { return std::uint64_t(Clock::now().time_since_epoch().count()) ^ (std::uint64_t(getpid()) << 32); }

// Removes /tmp/flytune-objects-PID folders whose search process is gone (a
// kill -9 or a crash skips the guard that removes a search's own folder).
void remove_stale_object_dirs() {
  std::error_code ec;
  const auto tmp = std::filesystem::temp_directory_path(ec);
  if (ec) return;
  for (const auto& entry : std::filesystem::directory_iterator(tmp, ec)) {
    const std::string name = entry.path().filename().string();
    constexpr std::string_view prefix = "flytune-objects-";
    if (!name.starts_with(prefix)) continue;
    long pid = 0;
    const std::string_view digits = std::string_view(name).substr(prefix.size());
    auto [end, err] = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    if (err != std::errc{} || end != digits.data() + digits.size() || process_alive(pid)) continue;
    std::error_code rm;
    std::filesystem::remove_all(entry.path(), rm);
  }
}

// A compile log with the reason its code object has no resources (an
// emulated build, a damaged object), so the record says why they are empty.
std::string with_analysis_note(std::string log, const std::string& analysis_error) {
  if (analysis_error.empty()) return log;
  if (!log.empty() && !log.ends_with('\n')) log += '\n';
  return log + "flytune: resources not recorded: " + analysis_error + "\n";
}

// Everything one target's compile produced, recorded in the store.
struct RecordedSpace {
  CompiledSpace space;
  std::int64_t toolchain_id = 0;
  std::map<std::string, std::int64_t> variant_ids;   // kernel name -> variants.id
  std::map<std::string, std::string> object_paths;   // kernel name -> file for the worker
  std::string support_path;
};

Result<RecordedSpace> compile_and_record(db::Store& store, const Target& target, const SearchConfig& cfg,
                                         TargetSummary& summary, const std::filesystem::path& object_dir) {
  CompileSpaceOptions opt;
  opt.space = cfg.space;
  opt.compile = cfg.compile;
  opt.compile.stop = &g_interrupted;  // Ctrl-C stops handing out compile jobs
  opt.progress = cfg.progress;
  if (cfg.baseline)
    for (KernelKind k : {KernelKind::moe1, KernelKind::moe2})
      if (auto d = default_variant(target, cfg.problem, k)) opt.extra.push_back(*d);
  RecordedSpace rs;
  rs.space = FT_TRY(compile_space(target, cfg.problem, opt));
  if (!rs.space.support) return std::unexpected(with_context(rs.space.support.error(), "support kernels"));
  summary.target = std::string(target.name);
  summary.backend = std::string(to_string(rs.space.backend));
  // The space's own variants (what `generate` lists); the defaults beside them apart.
  summary.defaults_added = rs.space.extra_added;
  const std::size_t all = rs.space.variants.size() + rs.space.not_started;
  summary.legal = all - std::min(all, rs.space.extra_added);
  summary.rejected = rs.space.rejected_by_legality;
  summary.cache_hits = rs.space.cache_hits;

  const CodeObject& support = *rs.space.support;
  rs.toolchain_id = FT_TRY(store.upsert_toolchain({0, std::string(to_string(support.backend)), support.toolchain_version, ""}));
  const std::string ext(code_object_extension(support.backend));
  auto write_object = [&](const CodeObject& co) -> Result<std::string> {
    auto path = object_dir / (co.hash + ext);
    if (!std::filesystem::exists(path)) {
      std::ofstream f(path, std::ios::binary);
      f.write(reinterpret_cast<const char*>(co.binary.data()), std::streamsize(co.binary.size()));
      if (!f) return fail(Errc::io, "cannot write a code object", path.string());
    }
    return path.string();
  };
  rs.support_path = FT_TRY(write_object(support));
  // The support unit goes into the database too, so `flytune export` ships the
  // exact align/reduce/shuffle build the winners were measured with.
  FT_CHECK(store.put_code_object(support.hash, ext.substr(1), support.binary));
  db::VariantRecord support_row{.kernel_name = support.kernel_name, .target = std::string(target.name), .kind = "support",
                                 .source_hash = support.cache_key, .code_object_hash = support.hash,
                                 .toolchain_id = rs.toolchain_id, .compile_log = support.log,
                                 .compile_seconds = support.compile_seconds};
  // Its resources are those of the align kernel, the layer's first launch.
  const LaunchShape align = align_launch(cfg.problem);
  if (auto r = analyze(support, target, align_entry(target), align.block, align.lds_bytes)) support_row.resources = to_db(*r);
  else support_row.compile_log = with_analysis_note(support_row.compile_log, r.error().describe());
  FT_TRY(store.upsert_variant(support_row));

  for (const CompiledVariant& cv : rs.space.variants) {
    db::VariantRecord vr;
    vr.kernel_name = cv.variant.name();
    vr.target = std::string(target.name);
    vr.kind = std::string(to_string(cv.variant.kind));
    vr.params = cv.variant.to_json();
    vr.toolchain_id = rs.toolchain_id;
    if (cv.object) {
      vr.source_hash = cv.object->cache_key;
      vr.code_object_hash = cv.object->hash;
      vr.compile_status = db::CompileStatus::ok;
      vr.compile_log = with_analysis_note(cv.object->log, cv.analysis_error);
      vr.compile_seconds = cv.object->compile_seconds;
      if (cv.resources) {
        vr.resources = to_db(*cv.resources);
        for (const auto& [m, n] : cv.resources->matrix_ops) vr.matrix_ops[m] = n;
      }
      FT_CHECK(store.put_code_object(cv.object->hash, ext.substr(1), cv.object->binary));
      rs.object_paths[vr.kernel_name] = FT_TRY(write_object(*cv.object));
      ++summary.compiled;
      if (!cv.pruned_because.empty()) ++summary.pruned;
    } else {
      vr.compile_status = db::CompileStatus::compile_error;
      vr.compile_log = cv.object.error().describe();
      ++summary.compile_failed;
    }
    rs.variant_ids[vr.kernel_name] = FT_TRY(store.upsert_variant(vr));
  }
  return rs;
}

// The GPU half of a search: one worker, restarted after faults.
class Measurer {
 public:
  explicit Measurer(const SearchConfig& cfg)
      : cfg_(cfg),
        exe_(cfg.worker_executable.empty() ? self_executable() : cfg.worker_executable) {}

  Result<nlohmann::json> start_and_query_device() {
    FT_CHECK(worker_.start(exe_, cfg_.device_selector));
    return worker_.request({{"op", "device"}}, 120s);
  }

  // Opens the problem in the worker; restarts re-send it.
  Status open(nlohmann::json request) {
    open_ = std::move(request);
    auto r = call(open_, 300s);
    if (!r) return std::unexpected(r.error());
    return {};
  }

  // Sends a request; a worker that died or hung is restarted (problem re-opened,
  // inputs re-sent) and the failure returned for the caller to record.
  Result<nlohmann::json> call(const nlohmann::json& req, std::chrono::milliseconds timeout) {
    if (!worker_.running()) FT_CHECK(restart());
    auto r = worker_.request(req, timeout);
    // A device error ends the worker (its context may be gone); a timeout or a
    // death already did. Start a fresh one for the next request.
    if (!r && (r.error().code == Errc::timeout || r.error().code == Errc::device || !worker_.running())) {
      ++crashes_;
      if (!g_interrupted.load()) {
        if (auto st = restart(); !st) return std::unexpected(st.error());
      }
    }
    return r;
  }

  Status set_inputs(int tokens, std::uint64_t seed, int empty_experts) {
    inputs_ = {{"op", "inputs"}, {"tokens", tokens}, {"seed", seed}, {"empty_experts", empty_experts}};
    auto r = call(inputs_, 300s);
    if (!r) return std::unexpected(r.error());
    return {};
  }

  std::size_t crashes() const { return crashes_; }
  nlohmann::json telemetry() {
    auto r = worker_.request({{"op", "telemetry"}}, 10s);
    return r ? *r : nlohmann::json::object();
  }

 private:
  Status restart() {
    FT_CHECK(worker_.start(exe_, cfg_.device_selector));
    if (!open_.is_null()) {
      auto r = worker_.request(open_, 300s);
      if (!r) return std::unexpected(r.error());
    }
    if (!inputs_.is_null()) {
      auto r = worker_.request(inputs_, 300s);
      if (!r) return std::unexpected(r.error());
    }
    return {};
  }

  const SearchConfig& cfg_;
  std::string exe_;
  WorkerProcess worker_;
  nlohmann::json open_, inputs_;
  std::size_t crashes_ = 0;
};

db::MeasurementStatus status_of(const Error& e) {
  switch (e.code) {
    case Errc::timeout: return db::MeasurementStatus::timeout;
    case Errc::verify: return db::MeasurementStatus::verify_failed;
    default: return db::MeasurementStatus::launch_error;
  }
}

struct Candidate {
  const CompiledVariant* cv;
  std::int64_t id;
  nlohmann::json spec;  // {variant, code_object, entry}
};

using Ranked = std::vector<std::pair<double, const Candidate*>>;  // (time, candidate), fastest first

// The stage pairs worth timing as a layer: from the best few of each stage,
// in order of their summed stage times, those the layer program can run (the
// routed weight placed alike, row blocks that line up); what was left out and
// why goes to `skipped`.
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

// The dry run: each target's space generated, compiled, analysed and recorded
// (no GPU). The run's status, or the error (the run then marked failed).
Result<db::RunStatus> dry_run(db::Store& store, const SearchConfig& cfg, SearchSummary& summary,
                              const std::filesystem::path& object_dir) {
  summary.device = "compile-only";
  for (const std::string& name : cfg.targets) {
    // Interrupted only while work remains: a run that did everything finished.
    if (g_interrupted.load()) return db::RunStatus::interrupted;
    const Target* target = FT_TRY(lookup_target(name));
    TargetSummary ts;
    auto rs = compile_and_record(store, *target, cfg, ts, object_dir);
    if (!rs && rs.error().code == Errc::interrupted) return db::RunStatus::interrupted;
    if (!rs) {
      (void)store.end_run(summary.run_id, db::RunStatus::failed);
      // Name the target once: toolchain errors already start with it.
      const std::string target_name(target->name);
      const bool named = rs.error().context == target_name || rs.error().context.starts_with(target_name + ": ");
      return std::unexpected(named ? rs.error() : with_context(rs.error(), target_name));
    }
    (void)FT_TRY(store.upsert_device(db::DeviceRecord::compile_only(target->name)));
    summary.targets.push_back(ts);
    if (rs->space.interrupted) return db::RunStatus::interrupted;
  }
  return db::RunStatus::finished;
}

// The device a worker reports ({"device": {...}} of its "device" answer).
DeviceInfo device_info_of(const nlohmann::json& dj) {
  DeviceInfo info;
  info.runtime = dj.value("runtime", "");
  info.ordinal = dj.value("ordinal", 0);
  info.name = dj.value("name", "");
  info.arch = dj.value("arch", "");
  info.compute_units = dj.value("compute_units", 0);
  info.memory_bytes = dj.value("memory_bytes", std::size_t(0));
  info.l2_bytes = dj.value("l2_bytes", std::size_t(0));
  info.max_shared_per_block = dj.value("max_shared_per_block", 0);
  info.clock_mhz = dj.value("clock_mhz", 0);
  info.driver_version = dj.value("driver_version", "");
  info.runtime_version = dj.value("runtime_version", "");
  info.pci_bus_id = dj.value("pci_bus_id", "");
  return info;
}

// This process's folder of code objects for the worker, removed with it.
struct ObjectDir {
  std::filesystem::path path = std::filesystem::temp_directory_path() / fmt::format("flytune-objects-{}", getpid());
  ObjectDir() {
    std::error_code ec;
    std::filesystem::create_directories(path, ec);
  }
  ObjectDir(const ObjectDir&) = delete;
  ObjectDir& operator=(const ObjectDir&) = delete;
  ~ObjectDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

// The target of the worker's GPU, which --target (when given) must name.
Result<const Target*> target_of_gpu(const SearchConfig& cfg, const DeviceInfo& info) {
  const Target* target = find_target(info.arch);
  if (!target)
    return fail(Errc::invalid_input, fmt::format("the GPU {} is {}, which flytune has no target for", info.name, info.arch));
  if (!cfg.targets.empty() && std::find(cfg.targets.begin(), cfg.targets.end(), std::string(target->name)) == cfg.targets.end())
    return fail(Errc::invalid_input, fmt::format("--target {} does not match the GPU {} ({}); drop --target or use --dry-run",
                                                 cfg.targets.front(), info.name, info.arch));
  return target;
}

// Which measurement a row is: the run, variant, problem, device and token count.
struct MeasurementIds {
  std::int64_t run_id = 0, variant_id = 0, problem_id = 0, device_id = 0;
  int tokens = 0;
};

// A measurement row from a worker's answer (timing and/or comparison) and
// the telemetry read beside it.
db::MeasurementRecord measurement_of(const MeasurementIds& ids, const std::string& phase, db::MeasurementStatus st,
                                     const std::string& error, const DeviceInfo& info, const nlohmann::json& result,
                                     const nlohmann::json& tele) {
  db::MeasurementRecord mr;
  mr.run_id = ids.run_id;
  mr.variant_id = ids.variant_id;
  mr.problem_id = ids.problem_id;
  mr.device_id = ids.device_id;
  mr.tokens = ids.tokens;
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
  return mr;
}

using RecordFn = std::function<Status(std::int64_t variant_id, int tokens, const std::string& phase, db::MeasurementStatus,
                                      const nlohmann::json& result, const std::string& error, const nlohmann::json& tele)>;

// Step 1: every usable variant verified once, on fresh inputs at an odd token
// count with one expert left without tokens (resumed from the store unless
// --force). The candidates that passed; nullopt when interrupted.
Result<std::optional<std::vector<Candidate>>> verify_all(const SearchConfig& cfg, Measurer& m, db::Store& store,
                                                          const RecordFn& record, const RecordedSpace& rs, TargetSummary& ts,
                                                          SearchSummary& summary, std::int64_t problem_id,
                                                          std::int64_t device_id, std::uint64_t seed) {
  std::vector<Candidate> candidates;
  std::vector<const CompiledVariant*> to_verify;
  for (const CompiledVariant& cv : rs.space.variants)
    if (cv.usable()) to_verify.push_back(&cv);
  auto spec_of = [&](const CompiledVariant& cv) {
    return nlohmann::json{{"variant", cv.variant.to_json()}, {"code_object", rs.object_paths.at(cv.variant.name())},
                          {"entry", cv.variant.name()}};
  };
  {
    const int empty = cfg.problem.experts > cfg.problem.topk ? 1 : 0;
    FT_CHECK(m.set_inputs(cfg.verify_tokens, seed, empty));
    Progress bar("verify", to_verify.size(), cfg.progress);
    for (const CompiledVariant* cv : to_verify) {
      if (g_interrupted.load()) return std::nullopt;
      const std::int64_t id = rs.variant_ids.at(cv->variant.name());
      if (!cfg.force) {
        auto prev = FT_TRY(store.latest_measurement({id, problem_id, device_id, cfg.verify_tokens}));
        if (prev && prev->phase == "verify") {
          ++summary.resumed;
          bar.advance(cv->variant.name());
          if (prev->status == db::MeasurementStatus::ok) {
            candidates.push_back({cv, id, spec_of(*cv)});
            ++ts.verified;
          } else {
            ++ts.verify_failed;
          }
          continue;
        }
      }
      nlohmann::json req = spec_of(*cv);
      req["op"] = "verify";
      auto r = m.call(req, 120s);
      if (!r) {
        ++ts.crashed;
        FT_CHECK(record(id, cfg.verify_tokens, "verify", status_of(r.error()), {}, r.error().describe(), {}));
      } else if (!(*r)["passed"].get<bool>()) {
        ++ts.verify_failed;
        FT_CHECK(record(id, cfg.verify_tokens, "verify", db::MeasurementStatus::verify_failed, *r,
                        (*r)["summary"].get<std::string>(), {}));
      } else {
        ++ts.verified;
        FT_CHECK(record(id, cfg.verify_tokens, "verify", db::MeasurementStatus::ok, *r, "", {}));
        candidates.push_back({cv, id, spec_of(*cv)});
      }
      bar.advance(cv->variant.name());
    }
  }
  return candidates;
}

// Interleaved A/B rounds of the best few candidates (A, B, C, B, C, A, ...),
// so drift hits all of them alike. Each candidate's time becomes the median of
// its rounds' medians, recorded once (phase "ab") with the rounds' spread.
void ab_rounds(Measurer& m, Ranked& timed, const RecordFn& record, int tokens, const nlohmann::json& tele) {
  std::vector<std::vector<double>> rounds(timed.size());
  for (int round = 0; round < kAbRounds; ++round)
    for (std::size_t j = 0; j < timed.size(); ++j) {
      const std::size_t k = (j + std::size_t(round)) % timed.size();
      nlohmann::json req = timed[k].second->spec;
      req["op"] = "time";
      req["reps"] = kAbReps;
      if (auto r = m.call(req, 120s)) {
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
          (void)record(timed[k].second->id, tokens, "ab", db::MeasurementStatus::ok, res, "", tele);
        }
      }
    }
  for (std::size_t k = 0; k < timed.size(); ++k)
    if (!rounds[k].empty()) {
      std::sort(rounds[k].begin(), rounds[k].end());
      timed[k].first = rounds[k][rounds[k].size() / 2];
    }
}

// Step 2 of a bucket: each stage kind's verified candidates timed at this T
// by the strategy (halving: 5 repetitions each, 30 for the best quarter,
// then A/B rounds of the best three), and the kind's winner recorded with its
// speedup over the default variant.
struct StageStep {
  const SearchConfig& cfg;
  const Target& target;
  Measurer& m;
  db::Store& store;
  const RecordFn& record;
  SearchSummary& summary;
  std::int64_t problem_id = 0, device_id = 0;
  const std::vector<Candidate>& candidates;
  std::mt19937_64& rng;

  // The kind's candidates, fastest first (empty when none ran); nullopt when interrupted.
  Result<std::optional<Ranked>> rank(KernelKind kind, int tokens, const nlohmann::json& tele) {
    std::vector<const Candidate*> pool;
    for (const Candidate& c : candidates)
      if (c.cv->variant.kind == kind) pool.push_back(&c);
    Ranked timed;
    if (pool.empty()) return timed;
    Progress bar(fmt::format("T={} {}", tokens, to_string(kind)), pool.size(), cfg.progress);
    const auto bucket_start = Clock::now();
    if (cfg.strategy == Strategy::random) std::shuffle(pool.begin(), pool.end(), rng);
    const std::size_t budget = cfg.strategy == Strategy::random && cfg.budget > 0 ? std::size_t(cfg.budget) : pool.size();
    const int reps = cfg.strategy == Strategy::halving ? kShortReps : kLongReps;
    const std::string phase = cfg.strategy == Strategy::halving ? "short" : "long";
    for (std::size_t i = 0; i < pool.size() && i < budget; ++i) {
      if (g_interrupted.load()) return std::nullopt;
      if (cfg.strategy == Strategy::random && cfg.time_limit_s > 0 &&
          std::chrono::duration<double>(Clock::now() - bucket_start).count() > cfg.time_limit_s)
        break;
      if (auto t = time_one(*pool[i], phase, reps, tokens, tele)) timed.emplace_back(*t, pool[i]);
      bar.advance(pool[i]->cv->variant.name());
    }
    bar.finish();
    auto by_time = [](auto& a, auto& b) { return a.first < b.first; };
    std::sort(timed.begin(), timed.end(), by_time);
    if (cfg.strategy == Strategy::halving && timed.size() > 1) {
      // Longer measurement of the best quarter, then interleaved A/B rounds of the top three.
      timed.resize(std::max<std::size_t>(2, (timed.size() + 3) / 4));
      for (auto& [t, c] : timed)
        if (auto lt = time_one(*c, "long", kLongReps, tokens, tele)) t = *lt;
      std::sort(timed.begin(), timed.end(), by_time);
      timed.resize(std::min<std::size_t>(3, timed.size()));
      ab_rounds(m, timed, record, tokens, tele);
      std::sort(timed.begin(), timed.end(), by_time);
    }
    return timed;
  }

  // The kind's winner (timed.front()) and its speedup over the default variant (timed the same way).
  Status record_winner(KernelKind kind, int tokens, const Ranked& timed, const nlohmann::json& tele) {
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
    auto prev = store.latest_measurement({win.id, problem_id, device_id, tokens});
    db::WinnerRecord w;
    w.problem_id = problem_id;
    w.device_id = device_id;
    w.tokens = tokens;
    w.kind = std::string(to_string(kind));
    w.variant_id = win.id;
    w.run_id = summary.run_id;
    w.median_us = timed.front().first;
    if (prev && *prev) {
      w.p10_us = (*prev)->p10_us;
      w.p90_us = (*prev)->p90_us;
    }
    w.default_variant_id = default_id;
    w.speedup_vs_default = speedup;
    FT_CHECK(store.set_winner(w));
    summary.winners.push_back({tokens, w.kind, win.cv->variant.name(), w.median_us, w.p10_us.value_or(0),
                               w.p90_us.value_or(0), std::nullopt, speedup, {}});
    return {};
  }

 private:
  // One timing of one candidate, resumed from the store when allowed.
  std::optional<double> time_one(const Candidate& c, const std::string& phase, int reps, int tokens, const nlohmann::json& tele) {
    if (!cfg.force) {
      auto prev = store.latest_measurement({c.id, problem_id, device_id, tokens});
      if (prev && *prev && (*prev)->status == db::MeasurementStatus::ok && (*prev)->median_us &&
          ((*prev)->phase == phase || (*prev)->phase == "ab" || ((*prev)->phase == "long" && phase == "short"))) {
        ++summary.resumed;
        return *(*prev)->median_us;
      }
    }
    nlohmann::json req = c.spec;
    req["op"] = "time";
    req["reps"] = reps;
    auto r = m.call(req, 120s);
    if (!r) {
      (void)record(c.id, tokens, phase, status_of(r.error()), {}, r.error().describe(), tele);
      return std::nullopt;
    }
    (void)record(c.id, tokens, phase, db::MeasurementStatus::ok, *r, "", tele);
    return (*r)["median_us"].get<double>();
  }
};

// Step 3 of a bucket, the whole layer. Stages are tuned alone, but a layer
// pads every expert's rows to the row block of its pair, so the pair is chosen
// among the best of each stage by timing them together (the layer program's
// steps, as the runtime runs them); the fastest pair that passes verification
// at this token count is timed at length. A bucket that ends without a layer
// winner says why.
struct LayerStep {
  const SearchConfig& cfg;
  const Target& target;
  Measurer& m;
  db::Store& store;
  const RecordFn& record;
  SearchSummary& summary;
  std::int64_t toolchain_id = 0, problem_id = 0, device_id = 0;
  const std::optional<Ceilings>& ceilings;

  // false when interrupted.
  Result<bool> run(int tokens, const Ranked& s1, const Ranked& s2, const nlohmann::json& tele) {
    std::string why;
    if (s1.empty() || s2.empty()) {
      no_layer(tokens, s1.empty() ? "no stage-1 variant was timed" : "no stage-2 variant was timed");
      return true;
    }
    std::vector<std::tuple<double, const Candidate*, const Candidate*>> paired;
    for (const auto& [a, b] : layer_pairs(target, cfg.problem, s1, s2, why)) {
      if (g_interrupted.load()) return false;
      nlohmann::json probe{{"op", "time_layer"}, {"stage1", a->spec}, {"stage2", b->spec}, {"reps", kAbReps}, {"graph", cfg.graph}};
      auto t = m.call(probe, 300s);
      if (!t) {
        why = fmt::format("timing {} + {} failed: {}", a->cv->variant.name(), b->cv->variant.name(), t.error().describe());
        continue;
      }
      paired.emplace_back((*t)["total"]["median_us"].get<double>(), a, b);
    }
    std::sort(paired.begin(), paired.end(), [](const auto& x, const auto& y) { return std::get<0>(x) < std::get<0>(y); });
    if (paired.empty()) {
      no_layer(tokens, why.empty() ? "no stage pair could be timed" : why);
      return true;
    }
    constexpr std::size_t kVerifyTries = 3;
    for (std::size_t pi = 0; pi < std::min(kVerifyTries, paired.size()); ++pi)
      if (FT_TRY(try_pair(tokens, std::get<1>(paired[pi]), std::get<2>(paired[pi]), tele, why))) return true;
    no_layer(tokens, why);
    return true;
  }

 private:
  void no_layer(int tokens, const std::string& reason) {
    summary.notes.push_back(fmt::format("T={}: no layer winner: {}", tokens, reason));
    if (cfg.progress) fmt::print(stderr, "T={}: no layer winner: {}\n", tokens, reason);
  }

  // Verifies the pair at this T, then times it at length and records it as
  // the bucket's layer winner; false (and why) when it fails either.
  Result<bool> try_pair(int tokens, const Candidate* c1, const Candidate* c2, const nlohmann::json& tele, std::string& why) {
    db::VariantRecord layer;
    layer.kernel_name = c1->cv->variant.name() + "+" + c2->cv->variant.name();
    layer.target = std::string(target.name);
    layer.kind = "layer";
    layer.params = {{"stage1", c1->cv->variant.to_json()}, {"stage2", c2->cv->variant.to_json()},
                    {"stage1_kernel", c1->cv->variant.name()}, {"stage2_kernel", c2->cv->variant.name()}};
    layer.toolchain_id = toolchain_id;
    const std::int64_t layer_id = FT_TRY(store.upsert_variant(layer));
    nlohmann::json req{{"stage1", c1->spec}, {"stage2", c2->spec}};
    req["op"] = "verify_layer";
    auto v = m.call(req, 600s);
    if (!v || !(*v)["passed"].get<bool>()) {
      const std::string message = v ? (*v)["summary"].get<std::string>() : v.error().describe();
      (void)record(layer_id, tokens, "verify", v ? db::MeasurementStatus::verify_failed : status_of(v.error()),
                   v ? *v : nlohmann::json{}, message, tele);
      why = fmt::format("{} failed verification at T={}: {}", layer.kernel_name, tokens, message);
      if (cfg.progress) fmt::print(stderr, "T={}: {}\n", tokens, why);
      return false;
    }
    req["op"] = "time_layer";
    req["reps"] = kLongReps;
    req["graph"] = cfg.graph;
    auto t = m.call(req, 300s);
    if (!t) {
      (void)record(layer_id, tokens, "layer", status_of(t.error()), {}, t.error().describe(), tele);
      why = fmt::format("timing {} failed: {}", layer.kernel_name, t.error().describe());
      return false;
    }
    nlohmann::json total = (*t)["total"];
    total["rel_l2"] = (*v)["rel_l2"];
    total["max_abs"] = (*v)["max_abs"];
    FT_CHECK(record(layer_id, tokens, "layer", db::MeasurementStatus::ok, total, "", tele));
    db::WinnerRecord w;
    w.problem_id = problem_id;
    w.device_id = device_id;
    w.tokens = tokens;
    w.kind = "layer";
    w.variant_id = layer_id;
    w.run_id = summary.run_id;
    w.median_us = total["median_us"].get<double>();
    w.p10_us = total["p10_us"].get<double>();
    w.p90_us = total["p90_us"].get<double>();
    FT_CHECK(store.set_winner(w));
    BucketResult br{tokens, "layer", layer.kernel_name, w.median_us, *w.p10_us, *w.p90_us, std::nullopt, std::nullopt,
                    nlohmann::json{{"align_us", (*t)["align"]["median_us"]}, {"stage1_us", (*t)["stage1"]["median_us"]},
                                   {"stage2_us", (*t)["stage2"]["median_us"]}, {"reduce_us", (*t)["reduce"]["median_us"]}}};
    if (ceilings) br.floor_us = roofline_floor_us(cfg.problem, tokens, *ceilings);
    summary.winners.push_back(br);
    return true;
  }
};

}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // A closed terminal or output pipe (`| head`) stops the search the same way,
  // so the run is closed and its temporary objects removed.
  sigaction(SIGHUP, &sa, nullptr);
  sigaction(SIGPIPE, &sa, nullptr);
}
bool interrupted() { return g_interrupted.load(); }

Result<Strategy> parse_strategy(std::string_view s) {
  if (s == "exhaustive") return Strategy::exhaustive;
  if (s == "random") return Strategy::random;
  if (s == "halving") return Strategy::halving;
  return fail(Errc::usage, fmt::format("unknown strategy '{}'; use exhaustive, random or halving", s));
}

std::string_view to_string(Strategy s) {
  switch (s) {
    case Strategy::exhaustive: return "exhaustive";
    case Strategy::random: return "random";
    case Strategy::halving: return "halving";
  }
  return "?";
}

nlohmann::json SearchSummary::to_json() const {
  nlohmann::json j{{"run_id", run_id}, {"db", db_path}, {"device", device}, {"interrupted", interrupted},
                   {"measurements", measurements}, {"resumed", resumed}, {"seconds", seconds},
                   {"dry_run", dry_run}, {"notes", notes},
                   {"targets", nlohmann::json::array()}, {"winners", nlohmann::json::array()}};
  for (const auto& t : targets)
    j["targets"].push_back({{"target", t.target}, {"backend", t.backend}, {"legal", t.legal}, {"rejected", t.rejected},
                            {"compiled", t.compiled}, {"compile_failed", t.compile_failed}, {"pruned", t.pruned},
                            {"defaults_added", t.defaults_added}, {"cache_hits", t.cache_hits},
                            {"verified", t.verified}, {"verify_failed", t.verify_failed}, {"crashed", t.crashed}});
  for (const auto& w : winners) {
    nlohmann::json r{{"tokens", w.tokens}, {"kind", w.kind}, {"kernel", w.kernel}, {"median_us", w.median_us},
                     {"p10_us", w.p10_us}, {"p90_us", w.p90_us}};
    if (w.floor_us) r["floor_us"] = *w.floor_us;
    if (w.speedup_vs_default) r["speedup_vs_default"] = *w.speedup_vs_default;
    if (!w.stages.is_null()) r["stages"] = w.stages;
    j["winners"].push_back(r);
  }
  j["notes"] = notes;
  return j;
}

Result<SearchSummary> run_search(const SearchConfig& cfg) {
  const auto t0 = Clock::now();
  FT_CHECK(cfg.problem.validate());
  db::Store store = FT_TRY(db::Store::open(cfg.db_path, db::OpenMode::create));
  SearchSummary summary;
  summary.db_path = cfg.db_path;
  summary.dry_run = cfg.dry_run;
  for (const db::StaleRun& r : store.stale_runs())
    summary.notes.push_back(fmt::format("run {} was left 'running' by process {}, which no longer exists (killed?); "
                                        "marked interrupted (its results are kept)", r.id, r.pid));
  nlohmann::json options{{"tokens", cfg.tokens}, {"dry_run", cfg.dry_run}, {"force", cfg.force},
                         {"problem", cfg.problem.key()}, {"graph", cfg.graph}, {"baseline", cfg.baseline}};
  if (!cfg.shard.empty()) options["shard"] = cfg.shard;
  summary.run_id = FT_TRY(store.begin_run(db::RunRecord::for_this_build(cfg.command_line, std::string(to_string(cfg.strategy)), options)));
  const std::int64_t problem_id = FT_TRY(store.upsert_problem(db::ProblemRecord::from(cfg.problem)));

  remove_stale_object_dirs();
  const ObjectDir objects;  // removed on every way out of the search
  const std::filesystem::path& object_dir = objects.path;

  auto finish = [&](db::RunStatus st) -> Result<SearchSummary> {
    summary.interrupted = st == db::RunStatus::interrupted;
    summary.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    FT_CHECK(store.end_run(summary.run_id, st));
    return summary;
  };

  if (cfg.dry_run) {
    const db::RunStatus st = FT_TRY(dry_run(store, cfg, summary, object_dir));
    return finish(st);
  }

  // --- GPU search -------------------------------------------------------------
  Measurer m(cfg);
  auto dev = m.start_and_query_device();
  if (!dev) {
    (void)store.end_run(summary.run_id, db::RunStatus::failed);
    return std::unexpected(dev.error());
  }
  const nlohmann::json& dj = (*dev)["device"];
  const DeviceInfo info = device_info_of(dj);
  summary.device = fmt::format("{} ({})", info.name, info.arch);
  auto gpu_target = target_of_gpu(cfg, info);
  if (!gpu_target) {
    (void)store.end_run(summary.run_id, db::RunStatus::failed);
    return std::unexpected(gpu_target.error());
  }
  const Target* target = *gpu_target;
  const std::int64_t device_id = FT_TRY(store.upsert_device(db::DeviceRecord::from(info)));
  const std::optional<Ceilings> ceilings = cfg.ceilings ? cfg.ceilings : measured_ceilings(info.name);

  TargetSummary ts;
  auto recorded = compile_and_record(store, *target, cfg, ts, object_dir);
  if (!recorded && recorded.error().code == Errc::interrupted) return finish(db::RunStatus::interrupted);
  RecordedSpace rs = FT_TRY(std::move(recorded));
  if (rs.space.interrupted) {
    summary.targets.push_back(ts);
    return finish(db::RunStatus::interrupted);
  }
  const int max_tokens = std::max(*std::max_element(cfg.tokens.begin(), cfg.tokens.end()), cfg.verify_tokens);
  FT_CHECK(m.open({{"op", "open"}, {"problem", {{"name", cfg.problem.name}, {"experts", cfg.problem.experts},
                                                    {"hidden", cfg.problem.hidden}, {"inter", cfg.problem.inter},
                                                    {"topk", cfg.problem.topk}, {"dtype", to_string(cfg.problem.dtype)},
                                                    {"routing", cfg.problem.routing.kind == Routing::Kind::replay
                                                                    ? "replay:" + cfg.problem.routing.replay_file
                                                                    : cfg.problem.routing.key()}}},
                      {"target", target->name}, {"support", rs.support_path}, {"max_tokens", max_tokens}}));
  const std::uint64_t seed = cfg.seed ? cfg.seed : fresh_seed();

  auto record = [&](std::int64_t variant_id, int tokens, const std::string& phase, db::MeasurementStatus st,
                    const nlohmann::json& result, const std::string& error, const nlohmann::json& tele) -> Status {
    const db::MeasurementRecord mr =
        measurement_of({summary.run_id, variant_id, problem_id, device_id, tokens}, phase, st, error, info, result, tele);
    (void)FT_TRY(store.add_measurement(mr));
    ++summary.measurements;
    return {};
  };

  // 1. Verify every usable variant once (verify_all), then time per bucket.
  const RecordFn record_fn = record;
  auto verified = verify_all(cfg, m, store, record_fn, rs, ts, summary, problem_id, device_id, seed);
  if (!verified) return std::unexpected(verified.error());
  if (!*verified) return finish(db::RunStatus::interrupted);
  const std::vector<Candidate> candidates = std::move(**verified);
  summary.targets.push_back(ts);

  LayerStep layer_step{cfg, *target, m, store, record_fn, summary, rs.toolchain_id, problem_id, device_id, ceilings};
  std::mt19937_64 rng(seed);
  StageStep stage_step{cfg, *target, m, store, record_fn, summary, problem_id, device_id, candidates, rng};

  // 2. Time per token bucket and kind (StageStep), then the layer.
  for (int tokens : cfg.tokens) {
    if (g_interrupted.load()) return finish(db::RunStatus::interrupted);
    FT_CHECK(m.set_inputs(tokens, seed + std::uint64_t(tokens), 0));
    const nlohmann::json tele = m.telemetry();
    std::map<KernelKind, std::vector<std::pair<double, const Candidate*>>> best;  // sorted (time, candidate)

    for (KernelKind kind : {KernelKind::moe1, KernelKind::moe2}) {
      auto ranked = stage_step.rank(kind, tokens, tele);
      if (!ranked) return std::unexpected(ranked.error());
      if (!*ranked) return finish(db::RunStatus::interrupted);
      best[kind] = std::move(**ranked);
      if (!best[kind].empty()) FT_CHECK(stage_step.record_winner(kind, tokens, best[kind], tele));
    }

    // 3. The whole layer (LayerStep).
    auto chosen = layer_step.run(tokens, best[KernelKind::moe1], best[KernelKind::moe2], tele);
    if (!chosen) return std::unexpected(chosen.error());
    if (!*chosen) return finish(db::RunStatus::interrupted);
  }
  summary.targets.back().crashed += m.crashes();
  return finish(db::RunStatus::finished);
}

}  // namespace ft
