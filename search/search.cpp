#include "search/search.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <csignal>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "store/kind.hpp"
#include "store/store.hpp"
#include "generator/emitter.hpp"
#include "layer/operation.hpp"
#include "layer/program.hpp"
#include "search/backward_search.hpp"
#include "search/compile_space.hpp"
#include "search/dealing.hpp"
#include "search/object_dir.hpp"
#include "search/measurer.hpp"
#include "search/progress.hpp"
#include "search/recorder.hpp"
#include "search/steps.hpp"
#include "search/strategy.hpp"
#include "system/subprocess.hpp"

namespace ft {
namespace {

std::atomic<bool> g_interrupted{false};

void on_sigint(int) { g_interrupted.store(true); }

using dealing::FirstError;
using dealing::WorkQueue;
using dealing::on_each;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

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

Result<RecordedSpace> compile_and_record(Recorder& rec, const Target& target, const SearchConfig& cfg,
                                         TargetSummary& summary, const std::filesystem::path& object_dir) {
  CompileSpaceOptions opt;
  opt.space = cfg.space;
  opt.compile = cfg.compile;
  opt.compile.stop = &g_interrupted;  // Ctrl-C stops handing out compile jobs
  opt.progress = cfg.progress;
  if (cfg.baseline)
    for (const op::Stage& st : op::moe_forward().stages)
      if (auto d = default_variant(target, cfg.problem, st.role)) opt.extra.push_back(*d);
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
  rs.toolchain_id = FT_TRY(rec.toolchain({0, std::string(to_string(support.backend)), support.toolchain_version, ""}));
  const std::string ext(code_object_extension(support.backend));
  rs.support_path = FT_TRY(write_object(object_dir, support));
  // The support unit goes into the database too, so `flytune export` ships the
  // exact align/reduce/shuffle build the winners were measured with.
  FT_CHECK(rec.code_object(support.hash, ext.substr(1), support.binary));
  db::VariantRecord support_row{.kernel_name = support.kernel_name, .target = std::string(target.name), .kind = db::kind_text(db::Kind::support),
                                 .source_hash = support.cache_key, .code_object_hash = support.hash,
                                 .toolchain_id = rs.toolchain_id, .compile_log = support.log,
                                 .compile_seconds = support.compile_seconds};
  // Its resources are those of the align kernel, the layer's first launch.
  const LaunchShape align = align_launch(cfg.problem);
  if (auto r = analyze(support, target, align_entry(target), align.block, align.lds_bytes)) support_row.resources = to_db(*r);
  else support_row.compile_log = with_analysis_note(support_row.compile_log, r.error().describe());
  FT_TRY(rec.variant(support_row));

  for (const CompiledVariant& cv : rs.space.variants) {
    db::VariantRecord vr;
    vr.kernel_name = cv.variant.name();
    vr.target = std::string(target.name);
    vr.kind = db::kind_text(db::kind_of(cv.variant.role));
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
      FT_CHECK(rec.code_object(cv.object->hash, ext.substr(1), cv.object->binary));
      rs.object_paths[vr.kernel_name] = FT_TRY(write_object(object_dir, *cv.object));
      ++summary.compiled;
      if (!cv.pruned_because.empty()) ++summary.pruned;
    } else {
      vr.compile_status = db::CompileStatus::compile_error;
      vr.compile_log = cv.object.error().describe();
      ++summary.compile_failed;
    }
    rs.variant_ids[vr.kernel_name] = FT_TRY(rec.variant(vr));
  }
  return rs;
}

// The dry run: each target's space generated, compiled, analysed and recorded
// (no GPU). The run's status, or the error (the run then marked failed).
Result<db::RunStatus> dry_run(Recorder& rec, const SearchConfig& cfg, SearchSummary& summary,
                              const std::filesystem::path& object_dir) {
  summary.device = "compile-only";
  for (const std::string& name : cfg.targets) {
    // Interrupted only while work remains: a run that did everything finished.
    if (g_interrupted.load()) return db::RunStatus::interrupted;
    const Target* target = FT_TRY(lookup_target(name));
    TargetSummary ts;
    auto rs = compile_and_record(rec, *target, cfg, ts, object_dir);
    if (!rs && rs.error().code == Errc::interrupted) return db::RunStatus::interrupted;
    if (!rs) {
      // Name the target once: toolchain errors already start with it.
      const std::string target_name(target->name);
      const bool named = rs.error().context == target_name || rs.error().context.starts_with(target_name + ": ");
      return std::unexpected(named ? rs.error() : with_context(rs.error(), target_name));
    }
    (void)FT_TRY(rec.device(db::DeviceRecord::compile_only(target->name)));
    summary.targets.push_back(ts);
    if (rs->space.interrupted) return db::RunStatus::interrupted;
  }
  return db::RunStatus::finished;
}

// One GPU of the search: its worker and, once its model is known, the context its steps run in.
struct Gpu {
  std::unique_ptr<Measurer> m;
  DeviceInfo info;
  std::size_t model = 0;
  std::optional<GpuContext> ctx;
  std::vector<int> buckets;   // searched here
  std::size_t verified = 0;   // variants verified here
};

// The GPUs of one model: one device row, one target and space, one winner set.
struct Model {
  std::string label;  // "NVIDIA H200 (sm_90a)"
  const Target* target = nullptr;
  std::int64_t device_id = 0;
  std::optional<Ceilings> ceilings;
  std::vector<std::size_t> gpus;
  const RecordedSpace* space = nullptr;
  TargetSummary ts;
  std::vector<Candidate> candidates;  // verified, in the space's order
};

// Deals `queue` to the GPUs `which`, one thread each, until it is empty or the
// search stops. setup(gpu) runs once per GPU and round; work(gpu, item) is
// false when the GPU stopped before finishing the item, which goes back to
// the queue. A GPU whose worker died leaves its share to the others; when
// none is left, the work left is an error.
Status deal(std::vector<Gpu>& gpus, const std::vector<std::size_t>& which, WorkQueue& queue, std::atomic<bool>& abort,
            const std::function<Status(Gpu&)>& setup, const std::function<Result<bool>(Gpu&, int)>& work) {
  FirstError first(abort);
  std::size_t alive_before = which.size() + 1;
  for (;;) {
    std::vector<std::size_t> alive;
    for (std::size_t i : which)
      if (!gpus[i].m->dead()) alive.push_back(i);
    if (alive.empty())
      return fail(Errc::device, fmt::format("no GPU's worker is left running; {} item(s) of work were not done", queue.size()));
    if (alive.size() >= alive_before) return fail(Errc::internal, "work was given back without a GPU stopping");
    alive_before = alive.size();
    on_each(alive, [&](std::size_t i) {
      Gpu& gpu = gpus[i];
      if (auto st = setup(gpu); !st) {
        if (!gpu.m->stopped()) first.set(with_context(st.error(), gpu.m->label()));
        return;
      }
      while (!gpu.m->stopped()) {
        const std::optional<int> item = queue.take();
        if (!item) return;
        auto done = work(gpu, *item);
        if (!done) {
          first.set(with_context(done.error(), gpu.m->label()));
          return;
        }
        if (!*done) {
          queue.give_back(*item);
          return;
        }
      }
    });
    FT_CHECK(first.status());
    if (g_interrupted.load() || queue.size() == 0) return {};
  }
}

// Step 1 of a model: every usable variant verified once on fresh inputs at an
// odd token count with one expert left without tokens (verify_one), dealt to
// the model's GPUs. Fills model.candidates and the summary's counts.
Status verify_model(const SearchConfig& cfg, std::vector<Gpu>& gpus, Model& model, std::atomic<bool>& abort,
                    std::uint64_t seed, bool many_bars) {
  std::vector<Candidate> all;
  for (const CompiledVariant& cv : model.space->space.variants)
    if (cv.usable())
      all.push_back({&cv, model.space->variant_ids.at(cv.variant.name()),
                     {cv.variant, model.space->object_paths.at(cv.variant.name()), cv.variant.name()}});
  std::vector<std::optional<VerifyOutcome>> outcome(all.size());
  std::vector<int> items(all.size());
  std::iota(items.begin(), items.end(), 0);
  WorkQueue queue(items);
  Progress bar(many_bars ? fmt::format("verify {}", model.label) : "verify", all.size(), cfg.progress,
               many_bars ? Progress::Mode::lines : Progress::Mode::automatic);
  // One expert without tokens where the routing allows it (a replayed trace is what it is).
  const int empty = cfg.problem.experts > cfg.problem.topk && cfg.problem.routing.kind != Routing::Kind::replay ? 1 : 0;
  FT_CHECK(deal(
      gpus, model.gpus, queue, abort, [&](Gpu& gpu) { return gpu.m->set_inputs({cfg.verify_tokens, seed, empty}); },
      [&](Gpu& gpu, int i) -> Result<bool> {
        const std::optional<VerifyOutcome> r = FT_TRY(verify_one(cfg, *gpu.ctx, all[std::size_t(i)]));
        if (!r) return false;
        outcome[std::size_t(i)] = *r;
        ++gpu.verified;
        bar.advance(all[std::size_t(i)].cv->variant.name());
        return true;
      }));
  bar.finish();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (outcome[i] == VerifyOutcome::passed) {
      model.candidates.push_back(all[i]);
      ++model.ts.verified;
    } else if (outcome[i] == VerifyOutcome::failed) {
      ++model.ts.verify_failed;
    }
  }
  return {};
}

// Steps 2 and 3 of a model: its token buckets dealt to its GPUs (the largest
// first when there are several, so the long ones do not come last); each
// bucket ranked per stage kind (StageStep) and its layer chosen (LayerStep)
// on one GPU.
Status search_buckets(const SearchConfig& cfg, std::vector<Gpu>& gpus, Model& model, std::atomic<bool>& abort,
                      std::uint64_t seed, bool many_gpus) {
  std::vector<int> order = cfg.tokens;
  if (model.gpus.size() > 1) std::sort(order.begin(), order.end(), std::greater<>());
  WorkQueue queue(order);
  std::atomic<std::size_t> done{0};
  return deal(
      gpus, model.gpus, queue, abort, [](Gpu&) -> Status { return {}; },
      [&](Gpu& gpu, int tokens) -> Result<bool> {
        const auto start = Clock::now();
        if (auto st = gpu.m->set_inputs({tokens, seed + std::uint64_t(tokens), 0}); !st) {
          if (gpu.m->stopped()) return false;
          return std::unexpected(st.error());
        }
        const TelemetryReading tele = gpu.m->telemetry();
        StageStep stage{cfg, *model.target, *gpu.ctx, model.candidates, std::mt19937_64(seed + std::uint64_t(tokens)), many_gpus};
        std::map<StageRole, Ranked> best;
        for (const op::Stage& st : op::moe_forward().stages) {  // each role ranked on its own, then the layer pairs them
          const StageRole kind = st.role;
          auto strategy = FT_TRY(make_strategy(cfg.strategy, {cfg.budget, cfg.time_limit_s, cfg.model_budget_s, cfg.model_explore}));
          std::optional<Ranked> ranked = FT_TRY(stage.rank(*strategy, kind, tokens, tele));
          if (!ranked) return false;
          best[kind] = std::move(*ranked);
          if (!best[kind].empty()) FT_CHECK(stage.record_winner(kind, tokens, best[kind], tele));
        }
        LayerStep layer{cfg, *model.target, *gpu.ctx, model.ceilings, many_gpus};
        if (!FT_TRY(layer.run(tokens, best[StageRole::stage1], best[StageRole::stage2], tele))) return false;
        gpu.buckets.push_back(tokens);
        const std::size_t finished = ++done;
        if (many_gpus && cfg.progress)
          fmt::print(stderr, "{}: T={} searched in {}; {} of {} bucket(s) of {} done\n", gpu.m->label(), tokens,
                     format_duration(std::chrono::duration<double>(Clock::now() - start).count()), finished,
                     cfg.tokens.size(), model.label);
        return true;
      });
}

// Starts one measurer per selector (a worker process each, or in this
// process) and asks each for its device; GPUs named twice (one bus id) are refused.
Result<std::vector<Gpu>> start_gpus(const SearchConfig& cfg, std::atomic<bool>& abort) {
  const std::vector<std::string> selectors = cfg.devices.empty() ? std::vector<std::string>{""} : cfg.devices;
  std::vector<Gpu> gpus;
  for (const std::string& sel : selectors) {
    Gpu gpu;
    gpu.m = cfg.in_process ? make_in_process_measurer(sel, abort) : make_worker_measurer(cfg.worker_executable, sel, abort);
    auto dev = gpu.m->start();
    if (!dev) return std::unexpected(sel.empty() ? dev.error() : with_context(dev.error(), sel));
    gpu.info = std::move(*dev);
    for (const Gpu& other : gpus)
      if (!gpu.info.pci_bus_id.empty() && other.info.pci_bus_id == gpu.info.pci_bus_id)
        return fail(Errc::usage, fmt::format("{} and {} are the same GPU (PCI {}); name each GPU once", other.m->label(),
                                             gpu.m->label(), gpu.info.pci_bus_id));
    gpus.push_back(std::move(gpu));
  }
  return gpus;
}

// The GPUs grouped by model (one device row each). Several models only with
// --allow-mixed: each then gets winners of its own.
Result<std::vector<Model>> group_by_model(const SearchConfig& cfg, Recorder& rec, std::vector<Gpu>& gpus) {
  std::vector<Model> models;
  for (std::size_t i = 0; i < gpus.size(); ++i) {
    const std::int64_t id = FT_TRY(rec.device(db::DeviceRecord::from(gpus[i].info)));
    auto it = std::find_if(models.begin(), models.end(), [&](const Model& m) { return m.device_id == id; });
    if (it == models.end()) {
      Model m;
      m.label = fmt::format("{} ({})", gpus[i].info.name, gpus[i].info.arch);
      m.device_id = id;
      m.target = FT_TRY(target_of_gpu(cfg, gpus[i].info));
      m.ceilings = cfg.ceilings ? cfg.ceilings : measured_ceilings(gpus[i].info.name);
      models.push_back(std::move(m));
      it = models.end() - 1;
    }
    it->gpus.push_back(i);
    gpus[i].model = std::size_t(it - models.begin());
  }
  if (models.size() > 1 && !cfg.allow_mixed) {
    std::vector<std::string> seen;
    for (const Gpu& g : gpus)
      seen.push_back(fmt::format("{}: {} ({}, driver {})", g.m->label(), g.info.name, g.info.arch, g.info.driver_version));
    return fail(Errc::usage, fmt::format("the GPUs are of different models ({}); pass --allow-mixed to tune each model "
                                         "with winners of its own, or name GPUs of one model with --devices",
                                         fmt::join(seen, "; ")));
  }
  return models;
}

// Opens the problem in every GPU's worker (its model's target and support
// unit, buffers for the largest bucket), all at once.
Status open_problem(const SearchConfig& cfg, std::vector<Gpu>& gpus, const std::vector<Model>& models,
                    std::atomic<bool>& abort) {
  const int max_tokens = std::max(*std::max_element(cfg.tokens.begin(), cfg.tokens.end()), cfg.verify_tokens);
  FirstError first(abort);
  std::vector<std::size_t> all(gpus.size());
  std::iota(all.begin(), all.end(), 0);
  on_each(all, [&](std::size_t i) {
    Gpu& gpu = gpus[i];
    const Model& model = models[gpu.model];
    if (auto st = gpu.m->open({cfg.problem, std::string(model.target->name), model.space->support_path, max_tokens}); !st)
      first.set(gpus.size() > 1 ? with_context(st.error(), gpu.m->label()) : st.error());
  });
  return first.status();
}

// "NVIDIA H200 (sm_90a)", "2x NVIDIA H200 (sm_90a)", or the models joined by " + ".
std::string devices_label(const std::vector<Model>& models) {
  std::vector<std::string> parts;
  for (const Model& m : models) parts.push_back(m.gpus.size() > 1 ? fmt::format("{}x {}", m.gpus.size(), m.label) : m.label);
  return fmt::format("{}", fmt::join(parts, " + "));
}

// Each target's space compiled and recorded once, whatever the number of
// devices; false when Ctrl-C stopped the compile.
Result<bool> compile_models(const SearchConfig& cfg, Recorder& rec, std::vector<Model>& models, SearchSummary& summary,
                            std::map<std::string, std::pair<RecordedSpace, TargetSummary>>& spaces,
                            const std::filesystem::path& object_dir) {
  for (Model& model : models) {
    const std::string name(model.target->name);
    if (!spaces.contains(name)) {
      TargetSummary ts;
      auto recorded = compile_and_record(rec, *model.target, cfg, ts, object_dir);
      if (!recorded && recorded.error().code == Errc::interrupted) return false;
      if (!recorded) return std::unexpected(recorded.error());
      if (recorded->space.interrupted) {
        summary.targets.push_back(ts);
        return false;
      }
      spaces.emplace(name, std::pair{std::move(*recorded), ts});
    }
    model.space = &spaces.at(name).first;
    model.ts = spaces.at(name).second;
  }
  return true;
}

// Each model on its own: verify every usable variant once (dealt to its
// devices), then its token buckets (dealt to its devices); then what each
// model and device did, in the summary.
Status search_models(const SearchConfig& cfg, std::vector<Gpu>& gpus, std::vector<Model>& models,
                     std::atomic<bool>& abort, std::uint64_t seed, SearchSummary& summary) {
  FirstError first(abort);
  std::vector<std::size_t> model_ids(models.size());
  std::iota(model_ids.begin(), model_ids.end(), 0);
  on_each(model_ids, [&](std::size_t k) {
    Model& model = models[k];
    if (auto st = verify_model(cfg, gpus, model, abort, seed, models.size() > 1); !st) return first.set(st.error());
    if (g_interrupted.load()) return;
    if (auto st = search_buckets(cfg, gpus, model, abort, seed, gpus.size() > 1); !st) first.set(st.error());
  });
  for (Model& model : models) {
    for (std::size_t i : model.gpus) model.ts.crashed += gpus[i].m->crashes();
    summary.targets.push_back(model.ts);
  }
  for (const Gpu& gpu : gpus) {
    std::vector<int> buckets = gpu.buckets;
    std::sort(buckets.begin(), buckets.end());
    summary.gpus.push_back({gpu.m->label(), gpu.info.name, gpu.info.pci_bus_id, buckets, gpu.verified, gpu.m->crashes(),
                            gpu.m->dead()});
  }
  return first.status();
}

// The search on devices (GPUs or emulated ones): one measurer each, grouped
// by model; the run's status, or the error.
Result<db::RunStatus> device_search(const SearchConfig& cfg, Recorder& rec, SearchSummary& summary,
                                    std::int64_t problem_id, const std::filesystem::path& object_dir) {
  std::atomic<bool> abort{false};  // an error on one device stops the others
  std::vector<Gpu> gpus = FT_TRY(start_gpus(cfg, abort));
  std::vector<Model> models = FT_TRY(group_by_model(cfg, rec, gpus));
  summary.device = devices_label(models);
  std::map<std::string, std::pair<RecordedSpace, TargetSummary>> spaces;
  if (!FT_TRY(compile_models(cfg, rec, models, summary, spaces, object_dir))) return db::RunStatus::interrupted;
  for (Gpu& gpu : gpus) {
    const Model& model = models[gpu.model];
    gpu.ctx.emplace(GpuContext{*gpu.m, gpu.info, summary.run_id, problem_id, model.device_id, model.space->toolchain_id, rec});
  }
  FT_CHECK(open_problem(cfg, gpus, models, abort));
  const Status searched = search_models(cfg, gpus, models, abort, cfg.seed ? cfg.seed : fresh_seed(), summary);
  // Buckets finish in any order on several devices: list them by token count
  // (each bucket's stage winners, then its layer, as one device recorded them).
  std::stable_sort(summary.winners.begin(), summary.winners.end(),
                   [](const BucketResult& a, const BucketResult& b) { return a.tokens < b.tokens; });
  std::stable_sort(summary.missing_layers.begin(), summary.missing_layers.end(),
                   [](const MissingLayer& a, const MissingLayer& b) { return a.tokens < b.tokens; });
  FT_CHECK(searched);
  return g_interrupted.load() ? db::RunStatus::interrupted : db::RunStatus::finished;
}

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
    nlohmann::json r{{"tokens", w.tokens}, {"pass", w.pass}, {"kind", w.kind}, {"kernel", w.kernel}, {"median_us", w.median_us},
                     {"p10_us", w.p10_us}, {"p90_us", w.p90_us}};
    if (w.floor_us) r["floor_us"] = *w.floor_us;
    if (w.speedup_vs_default) r["speedup_vs_default"] = *w.speedup_vs_default;
    if (!w.stages.is_null()) r["stages"] = w.stages;
    j["winners"].push_back(r);
  }
  j["notes"] = notes;
  j["missing_layers"] = nlohmann::json::array();
  for (const auto& m : missing_layers)
    j["missing_layers"].push_back({{"tokens", m.tokens}, {"device", m.device}, {"reason", m.reason}});
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : gpus)
    j["gpus"].push_back({{"device", g.selector}, {"name", g.name}, {"pci_bus_id", g.pci_bus_id}, {"buckets", g.buckets},
                         {"verified", g.verified}, {"crashes", g.crashes}, {"dead", g.dead}});
  return j;
}

Result<SearchSummary> run_search(const SearchConfig& cfg) {
  const auto t0 = Clock::now();
  FT_CHECK(cfg.problem.validate());
  FT_CHECK(check_strategy(cfg.strategy));
  const auto searches = [&](db::Pass p) { return std::ranges::find(cfg.passes, p) != cfg.passes.end(); };
  if (searches(db::Pass::backward)) FT_CHECK(check_backward_config(cfg));
  SearchSummary summary;
  summary.db_path = cfg.db_path;
  summary.dry_run = cfg.dry_run;
  Recorder rec(FT_TRY(db::Store::open(cfg.db_path, db::OpenMode::create)), summary);
  for (const db::StaleRun& r : rec.stale_runs())
    rec.note(fmt::format("run {} was left 'running' by process {}, which no longer exists (killed?); "
                         "marked interrupted (its results are kept)", r.id, r.pid));
  nlohmann::json options{{"tokens", cfg.tokens}, {"dry_run", cfg.dry_run}, {"force", cfg.force},
                         {"problem", cfg.problem.key()}, {"graph", cfg.graph}, {"baseline", cfg.baseline}};
  if (!cfg.shard.empty()) options["shard"] = cfg.shard;
  if (!cfg.devices.empty()) options["devices"] = cfg.devices;
  if (cfg.in_process) options["in_process"] = true;
  summary.run_id = FT_TRY(rec.begin_run(db::RunRecord::for_this_build(cfg.command_line, cfg.strategy, options)));

  remove_stale_object_dirs();
  const ObjectDir objects;  // removed on every way out of the search
  auto status = [&]() -> Result<db::RunStatus> {
    const std::int64_t problem_id = FT_TRY(rec.problem(db::ProblemRecord::from(cfg.problem)));
    if (cfg.dry_run) return dry_run(rec, cfg, summary, objects.path);
    db::RunStatus st = db::RunStatus::finished;
    if (searches(db::Pass::forward)) st = FT_TRY(device_search(cfg, rec, summary, problem_id, objects.path));
    if (searches(db::Pass::backward) && st == db::RunStatus::finished)
      st = FT_TRY(backward_search(cfg, rec, summary, problem_id, cfg.seed ? cfg.seed : fresh_seed(), objects.path));
    return st;
  }();
  if (!status) {
    (void)rec.end_run(summary.run_id, db::RunStatus::failed);
    return std::unexpected(status.error());
  }
  summary.interrupted = *status == db::RunStatus::interrupted;
  summary.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  FT_CHECK(rec.end_run(summary.run_id, *status));
  return summary;
}

}  // namespace ft
