#include "search/backward_search.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "compile/compile.hpp"
#include "generator/backward_gemm.hpp"
#include "generator/emitter.hpp"
#include "layer/operation.hpp"
#include "measure/worker/protocol.hpp"
#include "measure/worker/worker_device.hpp"
#include "search/measurer.hpp"
#include "search/object_dir.hpp"
#include "search/progress.hpp"
#include "search/role_descent.hpp"
#include "search/steps.hpp"
#include "search/strategy.hpp"
#include "store/kind.hpp"

namespace ft {
namespace {

// The emulator runs a program in milliseconds to seconds: fewer repetitions
// than a GPU's (the forward's long timing), the same protocol otherwise.
protocol::TimeProgramRequest timing_request(const std::string& selector) {
  protocol::TimeProgramRequest r;
  if (is_emu_selector(selector)) {
    r.warmup = 1;
    r.reps = kShortReps;
  } else {
    r.reps = kLongReps;
  }
  return r;
}

// A compiled backward GEMM configuration, its variants row and its code object's file.
struct Config {
  BackwardVariant v;
  std::int64_t id = 0;
  std::string path;
};

// A program: one configuration per role (indices into the configurations), its row.
struct Program {
  std::vector<std::size_t> config;  // by role, op::moe_backward().grad's order
  std::string name;
  std::int64_t id = 0;
  bool passed = false;
};

// The search's state on its one device, measured through its Measurer (a
// worker process, or the service in this process).
struct BackwardRun {
  const SearchConfig& cfg;
  Recorder& rec;
  std::uint64_t seed;
  std::filesystem::path object_dir;
  std::atomic<bool> stop{false};
  std::unique_ptr<Measurer> m;
  const Target* target = nullptr;
  std::optional<GpuContext> gpu;
  std::string support_path;
  std::vector<Config> configs;
  std::vector<std::vector<std::size_t>> by_role;  // each role's configurations
  std::vector<Program> programs;
  int input_tokens = 0;  // the tokens of the inputs the service holds
  bool verify_inputs = false;  // and whether they are the verification's (its seed, an empty expert)
  std::size_t verified = 0;  // programs verified here (answered, passed or not)

  Status start(SearchSummary& summary, std::int64_t run_id, std::int64_t problem_id);
  Status compile_and_record();
  Status make_programs();
  Result<std::size_t> add_program(std::vector<std::size_t> config);  // its index in programs
  Status verify(Program& p);
  protocol::ProgramKernels stages(const Program& p) const;
  Status inputs(int tokens, std::uint64_t seed, int empty);
  // Whether the device can take another request: no when the search stops
  // (Ctrl-C: Errc::interrupted) or the worker is dead (its error).
  Status usable() const;
  Status verify_all();
  // A program's timing at T with its parts (none when it comes from the store).
  Result<std::optional<ProgramTiming>> time(const Program& p, int tokens, const TelemetryReading& tele);
  Status bucket(int tokens);
};

Status BackwardRun::start(SearchSummary& summary, std::int64_t run_id, std::int64_t problem_id) {
  const std::string sel = cfg.devices.empty() ? std::string() : cfg.devices.front();
  m = cfg.in_process ? make_in_process_measurer(sel, stop) : make_worker_measurer(cfg.worker_executable, sel, stop);
  auto info = m->start();
  if (!info) return std::unexpected(sel.empty() ? info.error() : with_context(info.error(), sel));
  target = FT_TRY(target_of_gpu(cfg, *info));
  const std::int64_t device_id = FT_TRY(rec.device(db::DeviceRecord::from(*info)));
  if (summary.device.empty()) summary.device = fmt::format("{} ({})", info->name, info->arch);
  gpu.emplace(GpuContext{*m, *info, run_id, problem_id, device_id, 0, rec});
  return {};
}

Status BackwardRun::compile_and_record() {
  const Problem& pr = cfg.problem;
  const CodeObject support = FT_TRY(compile(emit_support(*target, pr.dtype), *target, cfg.compile));
  gpu->toolchain_id = FT_TRY(rec.toolchain({0, std::string(to_string(support.backend)), support.toolchain_version, ""}));
  const std::string format(code_object_extension(support.backend).substr(1));
  FT_CHECK(rec.code_object(support.hash, format, support.binary));
  FT_TRY(rec.variant({.kernel_name = support.kernel_name, .target = std::string(target->name),
                      .kind = db::kind_text(db::Kind::support), .source_hash = support.cache_key,
                      .code_object_hash = support.hash, .toolchain_id = gpu->toolchain_id, .compile_log = support.log,
                      .compile_seconds = support.compile_seconds}));
  support_path = FT_TRY(write_object(object_dir, support));

  std::map<std::string, std::size_t> index;  // name -> configs
  const auto compile_start = std::chrono::steady_clock::now();
  for (const op::GradRole& role : op::moe_backward().grad) {
    const int mm = op::extent(role.m, pr.hidden, pr.inter), n = op::extent(role.n, pr.hidden, pr.inter);
    std::vector<std::size_t>& mine = by_role.emplace_back();
    for (const BackwardVariant& v : backward_space(*target, pr.dtype, cfg.space.preset, role.gemm)) {
      if (why_illegal_for(v, mm, n)) continue;
      if (cfg.budget > 0 && int(mine.size()) == cfg.budget) break;
      if (interrupted()) return fail(Errc::interrupted, "interrupted while compiling the backward's configurations");
      auto [it, fresh] = index.emplace(v.name(), configs.size());
      if (fresh) {
        const CodeObject co = FT_TRY(compile(FT_TRY(emit_backward(v)), *target, cfg.compile));
        FT_CHECK(rec.code_object(co.hash, format, co.binary));
        const std::int64_t id = FT_TRY(rec.variant({.kernel_name = v.name(), .target = std::string(target->name),
                                                    .kind = db::kind_text(db::Kind::grad), .params = v.to_json(),
                                                    .source_hash = co.cache_key, .code_object_hash = co.hash,
                                                    .toolchain_id = gpu->toolchain_id, .compile_log = co.log,
                                                    .compile_seconds = co.compile_seconds}));
        configs.push_back({v, id, FT_TRY(write_object(object_dir, co))});
      }
      mine.push_back(it->second);
    }
    if (cfg.progress)
      fmt::print(stderr, "backward compile {}: {} configurations ({} built so far, {:.0f} s)\n", to_string(role.launch), mine.size(),
                 configs.size(), std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count());
    if (mine.empty())
      return fail(Errc::invalid_input,
                  fmt::format("--pass backward: no {} configuration of the --space preset fits {} (m = {}, n = {})",
                              to_string(role.launch), pr.key(), mm, n));
  }
  return {};
}

Status BackwardRun::make_programs() {
  std::vector<std::size_t> base;
  for (const auto& role : by_role) base.push_back(role.front());
  std::vector<std::vector<std::size_t>> all{base};
  for (std::size_t r = 0; r < by_role.size(); ++r)
    for (std::size_t j = 1; j < by_role[r].size(); ++j) {
      std::vector<std::size_t> p = base;
      p[r] = by_role[r][j];
      all.push_back(std::move(p));
    }
  for (auto& config : all) FT_TRY(add_program(std::move(config)));
  return {};
}

Result<std::size_t> BackwardRun::add_program(std::vector<std::size_t> config) {
  Program p{std::move(config), "", 0, false};
  nlohmann::json params = nlohmann::json::object();
  std::vector<std::string> names;
  for (std::size_t r = 0; r < p.config.size(); ++r) {
    const std::string role(to_string(op::moe_backward().grad[r].launch));
    names.push_back(configs[p.config[r]].v.name());
    params[role] = names.back();
  }
  p.name = fmt::format("{}", fmt::join(names, "+"));
  p.id = FT_TRY(rec.variant({.kernel_name = p.name, .target = std::string(target->name),
                             .kind = db::kind_text(db::Kind::backward), .params = params,
                             .toolchain_id = gpu->toolchain_id}));
  programs.push_back(std::move(p));
  return programs.size() - 1;
}

protocol::ProgramKernels BackwardRun::stages(const Program& p) const {
  protocol::ProgramKernels out{&op::moe_backward(), {}, {}};
  for (std::size_t i = 0; i < p.config.size(); ++i) {
    const Config& c = configs[p.config[i]];
    out.grad.push_back({op::moe_backward().grad[i].launch, c.v, c.path, c.v.name()});
  }
  return out;
}

Status BackwardRun::inputs(int tokens, std::uint64_t s, int empty) {
  FT_CHECK(m->set_inputs({tokens, s, empty}));
  input_tokens = tokens;
  return {};
}

Status BackwardRun::usable() const {
  if (interrupted() || stop.load()) return fail(Errc::interrupted, "the backward search was interrupted");
  if (m->dead()) return fail(Errc::device, fmt::format("the worker on {} could not be restarted", m->label()));
  return {};
}

// Each program verified once at the verify token count, or its verdict taken
// from the store. A program whose request fails (the worker died, hung or hit
// a device error: it is restarted) is recorded as failed and not retried.
Status BackwardRun::verify_all() {
  for (Program& p : programs) FT_CHECK(verify(p));
  return {};
}

// Once at the verify token count, or the verdict taken from the store.
Status BackwardRun::verify(Program& p) {
  const int T = cfg.verify_tokens;
  if (!cfg.force) {
    auto prev = FT_TRY(rec.latest({p.id, gpu->problem_id, gpu->device_id, T}));
    if (prev && prev->phase == "verify") {
      rec.resumed();
      p.passed = prev->status == db::MeasurementStatus::ok;
      return {};
    }
  }
  FT_CHECK(usable());
  if (input_tokens != T || !verify_inputs) {
    FT_CHECK(inputs(T, seed, cfg.problem.experts > cfg.problem.topk ? 1 : 0));
    verify_inputs = true;
  }
  auto v = m->verify_program({stages(p)});
  if (!v) {
    FT_CHECK(usable());  // a request cut short by Ctrl-C is not the program's failure
    FT_CHECK(gpu->record(p.id, T, "verify", status_of(v.error()), {}, v.error().describe(), {}));
    if (cfg.progress) fmt::print(stderr, "backward verify {}: FAILED: {}\n", p.name, v.error().describe());
    return {};
  }
  p.passed = v->passed;
  ++verified;
  FT_CHECK(gpu->record(p.id, T, "verify", p.passed ? db::MeasurementStatus::ok : db::MeasurementStatus::verify_failed,
                       {{}, *v}, p.passed ? "" : v->summary, {}));
  if (cfg.progress) fmt::print(stderr, "backward verify {}: {}\n", p.name, p.passed ? "passed" : "FAILED: " + v->summary);
  return {};
}

// A program's timing at T: from the store unless --force; nullopt when it failed (recorded).
Result<std::optional<ProgramTiming>> BackwardRun::time(const Program& p, int tokens, const TelemetryReading& tele) {
  if (!cfg.force) {
    auto prev = FT_TRY(rec.latest({p.id, gpu->problem_id, gpu->device_id, tokens}));
    if (prev && prev->phase == "long" && prev->status == db::MeasurementStatus::ok && prev->median_us) {
      rec.resumed();
      return ProgramTiming{{*prev->median_us, prev->p10_us.value_or(*prev->median_us), prev->p90_us.value_or(*prev->median_us),
                            prev->min_us.value_or(*prev->median_us), prev->samples},
                           {}};
    }
  }
  FT_CHECK(usable());
  if (input_tokens != tokens || verify_inputs) {
    FT_CHECK(inputs(tokens, seed + std::uint64_t(tokens), 0));
    verify_inputs = false;
  }
  protocol::TimeProgramRequest req = timing_request(m->selector());
  req.program = stages(p);
  auto t = m->time_program(req);
  if (!t) {
    FT_CHECK(usable());
    FT_CHECK(gpu->record(p.id, tokens, "long", status_of(t.error()), {}, t.error().describe(), tele));
    return std::optional<ProgramTiming>{};
  }
  FT_CHECK(gpu->record(p.id, tokens, "long", db::MeasurementStatus::ok, {t->total, {}}, "", tele));
  return std::optional<ProgramTiming>{std::move(*t)};
}

Status BackwardRun::bucket(int tokens) {
  const TelemetryReading tele = m->telemetry();
  std::vector<std::optional<ProgramTiming>> timed(programs.size());
  const auto passed = std::ranges::count_if(programs, [](const Program& p) { return p.passed; });
  Progress bar(fmt::format("backward time T={}", tokens), std::size_t(passed), cfg.progress);
  for (std::size_t i = 0; i < programs.size(); ++i)
    if (programs[i].passed) {
      timed[i] = FT_TRY(time(programs[i], tokens, tele));
      bar.advance(timed[i] ? fmt::format("{:.1f} us {}", timed[i]->total.median_us, programs[i].name) : "failed " + programs[i].name);
    }
  bar.finish();
  // The program of each role's fastest configuration at T (search/role_descent.hpp),
  // when it is new: configurations that win in several roles (the K-grouped
  // GEMM's two, say) meet in one program, verified and timed like the others.
  std::vector<std::vector<std::size_t>> configs_of;
  std::vector<std::optional<double>> us;
  for (std::size_t i = 0; i < programs.size(); ++i) {
    configs_of.push_back(programs[i].config);
    us.push_back(timed[i] ? std::optional<double>(timed[i]->total.median_us) : std::nullopt);
  }
  if (auto config = role_descent_step(configs_of, us)) {
    const std::size_t i = FT_TRY(add_program(std::move(*config)));
    FT_CHECK(verify(programs[i]));
    timed.emplace_back();
    if (programs[i].passed) timed[i] = FT_TRY(time(programs[i], tokens, tele));
  }
  const Program* best = nullptr;
  const ProgramTiming* best_timing = nullptr;
  for (std::size_t i = 0; i < programs.size(); ++i)
    if (timed[i] && (!best || timed[i]->total.median_us < best_timing->total.median_us)) {
      best = &programs[i];
      best_timing = &*timed[i];
    }
  if (!best) {
    rec.note(fmt::format("T={}: no backward winner: no backward program passed verification and timing", tokens));
    return {};
  }
  const Timing& best_t = best_timing->total;
  nlohmann::json parts;  // support_us, dgrad2_us, ...: where the winner's time goes (null when resumed from the store)
  for (const auto& [name, part] : best_timing->parts) parts[name + "_us"] = part.median_us;
  db::WinnerRecord w{.problem_id = gpu->problem_id, .device_id = gpu->device_id, .tokens = tokens,
                     .kind = db::kind_text(db::Kind::layer), .variant_id = best->id, .run_id = gpu->run_id,
                     .median_us = best_t.median_us, .p10_us = best_t.p10_us, .p90_us = best_t.p90_us,
                     .pass = db::Pass::backward};
  BucketResult line{.tokens = tokens, .kind = db::kind_text(db::Kind::layer), .kernel = best->name,
                    .median_us = best_t.median_us, .p10_us = best_t.p10_us, .p90_us = best_t.p90_us,
                    .stages = std::move(parts), .pass = std::string(db::to_string(db::Pass::backward))};
  return rec.winner(w, line);
}

}  // namespace

Status check_backward_config(const SearchConfig& cfg) {
  if (cfg.problem.fp8())
    return fail(Errc::usage, "--pass backward: fp8 problems have no backward kernels; give --dtype bf16 or f16");
  if (cfg.dry_run)
    return fail(Errc::usage, "--pass backward measures on a device (a GPU, or the CPU emulator with --emulate); "
                             "--dry-run only compiles");
  if (cfg.devices.size() > 1)
    return fail(Errc::usage, "--pass backward measures on one device in this version; name one with --device");
  if (!cfg.space.overrides.empty())
    return fail(Errc::usage, "--pass backward takes a preset --space (default, small or wide): the backward GEMMs "
                             "have axes of their own");
  return {};
}

Result<db::RunStatus> backward_search(const SearchConfig& cfg, Recorder& rec, SearchSummary& summary,
                                      std::int64_t problem_id, std::uint64_t seed,
                                      const std::filesystem::path& object_dir) {
  FT_CHECK(check_backward_config(cfg));
  BackwardRun run{cfg, rec, seed, object_dir};
  auto status = [&]() -> Status {
    FT_CHECK(run.start(summary, summary.run_id, problem_id));
    FT_CHECK(run.compile_and_record());
    const int max_tokens = std::max(*std::max_element(cfg.tokens.begin(), cfg.tokens.end()), cfg.verify_tokens);
    FT_CHECK(run.m->open({cfg.problem, std::string(run.target->name), run.support_path, max_tokens,
                          &op::moe_backward()}));
    FT_CHECK(run.make_programs());
    FT_CHECK(run.verify_all());
    for (int tokens : cfg.tokens) FT_CHECK(run.bucket(tokens));
    return {};
  }();
  if (run.m) summary.gpus.push_back({run.m->label(), run.gpu ? run.gpu->info.name : "", run.gpu ? run.gpu->info.pci_bus_id : "",
                                     cfg.tokens, run.verified, run.m->crashes(), run.m->dead()});
  if (!status && status.error().code == Errc::interrupted) return db::RunStatus::interrupted;
  FT_CHECK(status);
  return db::RunStatus::finished;
}

}  // namespace ft
