#include "search/backward_search.hpp"

#include <algorithm>
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
#include "measure/backward_bench.hpp"
#include "measure/worker/worker_device.hpp"
#include "search/steps.hpp"
#include "store/kind.hpp"

namespace ft {
namespace {

// The emulator runs a program in milliseconds to seconds: few repetitions.
constexpr TimingOptions kTiming{.warmup = 1, .reps = 5, .flush_l2 = false};

// A compiled backward GEMM configuration and its variants row.
struct Config {
  BackwardVariant v;
  std::int64_t id = 0;
  FunctionHandle fn{};
};

// A program: one configuration per role (indices into the configurations), its row.
struct Program {
  std::vector<std::size_t> config;  // by role, op::moe_backward().grad's order
  std::string name;
  std::int64_t id = 0;
  bool passed = false;
};

// Context every measurement row carries.
struct Ids {
  std::int64_t run = 0, problem = 0, device = 0, toolchain = 0;
  std::string bus;
};

Status record(Recorder& rec, const Ids& ids, std::int64_t variant, int tokens, std::string_view phase,
              db::MeasurementStatus st, const std::optional<Timing>& t, const std::optional<Comparison>& c,
              const std::string& error) {
  Measured result{t, std::nullopt};
  if (c) result.comparison = protocol::VerifyAnswer{c->passed, c->rel_l2, c->max_abs, c->summary()};
  db::MeasurementRecord m =
      measurement_row({variant, ids.problem, ids.device, tokens}, ids.run, phase, st, result, error, {});
  m.pci_bus_id = ids.bus;
  return rec.measurement(m);
}

// The search's state on its one emulated device.
struct BackwardRun {
  const SearchConfig& cfg;
  Recorder& rec;
  const Target& target;
  std::uint64_t seed;
  Ids ids;
  std::unique_ptr<Device> dev;
  std::unique_ptr<BackwardBench> bench;
  std::vector<Config> configs;
  std::vector<std::vector<std::size_t>> by_role;  // each role's configurations
  std::vector<Program> programs;

  Status compile_and_record();
  Status make_programs();
  LayerRecipe recipe(const Program& p) const;
  RoleKernels kernels(const Program& p) const;
  Status verify_all();
  Result<std::optional<Timing>> time(const Program& p, int tokens);
  Status bucket(int tokens);
};

Status BackwardRun::compile_and_record() {
  const Problem& pr = cfg.problem;
  const CodeObject support = FT_TRY(compile(emit_support(target, pr.dtype), target, cfg.compile));
  ids.toolchain = FT_TRY(rec.toolchain({0, std::string(to_string(support.backend)), support.toolchain_version, ""}));
  const std::string format(code_object_extension(support.backend).substr(1));
  FT_CHECK(rec.code_object(support.hash, format, support.binary));
  FT_TRY(rec.variant({.kernel_name = support.kernel_name, .target = std::string(target.name),
                      .kind = db::kind_text(db::Kind::support), .source_hash = support.cache_key,
                      .code_object_hash = support.hash, .toolchain_id = ids.toolchain, .compile_log = support.log,
                      .compile_seconds = support.compile_seconds}));
  bench = FT_TRY(BackwardBench::create(*dev, pr, target, support.binary));

  std::map<std::string, std::size_t> index;  // name -> configs
  for (const op::GradRole& role : op::moe_backward().grad) {
    const int m = op::extent(role.m, pr.hidden, pr.inter), n = op::extent(role.n, pr.hidden, pr.inter);
    std::vector<std::size_t>& mine = by_role.emplace_back();
    for (const BackwardVariant& v : backward_space(target, pr.dtype, cfg.space.preset, role.gemm)) {
      if (why_illegal_for(v, m, n)) continue;
      if (cfg.budget > 0 && int(mine.size()) == cfg.budget) break;
      auto [it, fresh] = index.emplace(v.name(), configs.size());
      if (fresh) {
        const CodeObject co = FT_TRY(compile(FT_TRY(emit_backward(v)), target, cfg.compile));
        FT_CHECK(rec.code_object(co.hash, format, co.binary));
        const std::int64_t id = FT_TRY(rec.variant({.kernel_name = v.name(), .target = std::string(target.name),
                                                    .kind = db::kind_text(db::Kind::grad), .params = v.to_json(),
                                                    .source_hash = co.cache_key, .code_object_hash = co.hash,
                                                    .toolchain_id = ids.toolchain, .compile_log = co.log,
                                                    .compile_seconds = co.compile_seconds}));
        configs.push_back({v, id, FT_TRY(bench->load(co.binary, v.name()))});
      }
      mine.push_back(it->second);
    }
    if (mine.empty())
      return fail(Errc::invalid_input,
                  fmt::format("--pass backward: no {} configuration of the --space preset fits {} (m = {}, n = {})",
                              to_string(role.launch), pr.key(), m, n));
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
  for (auto& config : all) {
    Program p{std::move(config), "", 0, false};
    nlohmann::json params = nlohmann::json::object();
    std::vector<std::string> names;
    for (std::size_t r = 0; r < p.config.size(); ++r) {
      const std::string role(to_string(op::moe_backward().grad[r].launch));
      names.push_back(configs[p.config[r]].v.name());
      params[role] = names.back();
    }
    p.name = fmt::format("{}", fmt::join(names, "+"));
    p.id = FT_TRY(rec.variant({.kernel_name = p.name, .target = std::string(target.name),
                               .kind = db::kind_text(db::Kind::backward), .params = params,
                               .toolchain_id = ids.toolchain}));
    programs.push_back(std::move(p));
  }
  return {};
}

LayerRecipe BackwardRun::recipe(const Program& p) const {
  LayerRecipe r{&target, cfg.problem, {}};
  for (std::size_t i = 0; i < p.config.size(); ++i)
    r.grad.push_back({op::moe_backward().grad[i].launch, configs[p.config[i]].v});
  return r;
}

RoleKernels BackwardRun::kernels(const Program& p) const {
  RoleKernels k;
  for (std::size_t i = 0; i < p.config.size(); ++i) {
    const FunctionHandle f = configs[p.config[i]].fn;
    switch (op::moe_backward().grad[i].launch) {
      case Role::dgrad2: k.dgrad2 = f; break;
      case Role::dgrad1: k.dgrad1 = f; break;
      case Role::wgrad2: k.wgrad2 = f; break;
      default: k.wgrad1 = f; break;
    }
  }
  return k;
}

// Each program verified once at the verify token count, or its verdict taken from the store.
Status BackwardRun::verify_all() {
  const int T = cfg.verify_tokens;
  const int empty = cfg.problem.experts > cfg.problem.topk ? 1 : 0;
  bool inputs = false;
  for (Program& p : programs) {
    if (!cfg.force) {
      auto prev = FT_TRY(rec.latest({p.id, ids.problem, ids.device, T}));
      if (prev && prev->phase == "verify") {
        rec.resumed();
        p.passed = prev->status == db::MeasurementStatus::ok;
        continue;
      }
    }
    if (!inputs) FT_CHECK(bench->set_inputs(T, seed, empty));
    inputs = true;
    auto check = bench->verify(recipe(p), kernels(p));
    if (!check) {
      FT_CHECK(record(rec, ids, p.id, T, "verify", db::MeasurementStatus::launch_error, {}, {}, check.error().describe()));
      continue;
    }
    p.passed = check->passed();
    FT_CHECK(record(rec, ids, p.id, T, "verify", p.passed ? db::MeasurementStatus::ok : db::MeasurementStatus::verify_failed,
                    {}, check->worst(), p.passed ? "" : check->summary()));
    if (cfg.progress)
      fmt::print(stderr, "backward verify {}: {}\n", p.name, p.passed ? "passed" : "FAILED: " + check->summary());
  }
  return {};
}

// A program's timing at T: from the store unless --force; nullopt when it failed (recorded).
Result<std::optional<Timing>> BackwardRun::time(const Program& p, int tokens) {
  if (!cfg.force) {
    auto prev = FT_TRY(rec.latest({p.id, ids.problem, ids.device, tokens}));
    if (prev && prev->phase == "long" && prev->status == db::MeasurementStatus::ok && prev->median_us) {
      rec.resumed();
      return Timing{*prev->median_us, prev->p10_us.value_or(*prev->median_us), prev->p90_us.value_or(*prev->median_us),
                    prev->min_us.value_or(*prev->median_us), prev->samples};
    }
  }
  if (bench->tokens() != tokens) FT_CHECK(bench->set_inputs(tokens, seed + std::uint64_t(tokens), 0));
  auto t = bench->time(recipe(p), kernels(p), kTiming);
  if (!t) {
    FT_CHECK(record(rec, ids, p.id, tokens, "long", db::MeasurementStatus::launch_error, {}, {}, t.error().describe()));
    return std::optional<Timing>{};
  }
  FT_CHECK(record(rec, ids, p.id, tokens, "long", db::MeasurementStatus::ok, *t, {}, ""));
  return std::optional<Timing>{*t};
}

Status BackwardRun::bucket(int tokens) {
  const Program* best = nullptr;
  Timing best_t;
  for (const Program& p : programs) {
    if (!p.passed) continue;
    const std::optional<Timing> t = FT_TRY(time(p, tokens));
    if (t && (!best || t->median_us < best_t.median_us)) {
      best = &p;
      best_t = *t;
    }
  }
  if (!best) {
    rec.note(fmt::format("T={}: no backward winner: no backward program passed verification and timing", tokens));
    return {};
  }
  db::WinnerRecord w{.problem_id = ids.problem, .device_id = ids.device, .tokens = tokens,
                     .kind = db::kind_text(db::Kind::layer), .variant_id = best->id, .run_id = ids.run,
                     .median_us = best_t.median_us, .p10_us = best_t.p10_us, .p90_us = best_t.p90_us,
                     .pass = db::Pass::backward};
  BucketResult line{.tokens = tokens, .kind = db::kind_text(db::Kind::layer), .kernel = best->name,
                    .median_us = best_t.median_us, .p10_us = best_t.p10_us, .p90_us = best_t.p90_us,
                    .pass = std::string(db::to_string(db::Pass::backward))};
  return rec.winner(w, line);
}

}  // namespace

Status check_backward_config(const SearchConfig& cfg) {
  if (cfg.problem.fp8())
    return fail(Errc::usage, "--pass backward: fp8 problems have no backward kernels; give --dtype bf16 or f16");
  if (cfg.dry_run || cfg.devices.size() != 1 || !is_emu_selector(cfg.devices.front()))
    return fail(Errc::usage, "--pass backward runs on the CPU emulator of one target in this version; add --emulate");
  if (!cfg.space.overrides.empty())
    return fail(Errc::usage, "--pass backward takes a preset --space (default, small or wide): the backward GEMMs "
                             "have axes of their own");
  return {};
}

Result<db::RunStatus> backward_search(const SearchConfig& cfg, Recorder& rec, SearchSummary& summary,
                                      std::int64_t problem_id, std::uint64_t seed) {
  FT_CHECK(check_backward_config(cfg));
  const EmuSelector sel = FT_TRY(parse_emu_selector(cfg.devices.front()));
  BackwardRun run{cfg, rec, *sel.target, seed, {summary.run_id, problem_id, 0, 0, ""}, nullptr, nullptr, {}, {}, {}};
  run.dev = FT_TRY(open_worker_device(cfg.devices.front()));
  run.ids.device = FT_TRY(rec.device(db::DeviceRecord::from(run.dev->info())));
  run.ids.bus = run.dev->info().pci_bus_id;
  if (summary.device.empty()) summary.device = fmt::format("{} ({})", run.dev->info().name, run.dev->info().arch);
  FT_CHECK(run.compile_and_record());
  FT_CHECK(run.make_programs());
  FT_CHECK(run.verify_all());
  for (int tokens : cfg.tokens) {
    if (interrupted()) return db::RunStatus::interrupted;
    FT_CHECK(run.bucket(tokens));
  }
  return db::RunStatus::finished;
}

}  // namespace ft
