// flytune verify: check variants against the reference on fresh random inputs
// at several token counts, on the GPU or (--emulate) on the CPU emulator.
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "cli/option_checks.hpp"
#include "cli/problem_options.hpp"
#include "generator/target.hpp"
#include "search/progress.hpp"
#include "search/verify_space.hpp"

namespace ft::cli {
namespace {

struct VerifyOptions {
  ProblemOptions problem;
  std::string target;
  bool emulate = false;
  std::string space = "default";
  std::vector<std::string> variants;
  std::string tokens;
  std::string device;
  std::uint64_t seed = 0;
  bool json = false;
  bool problem_given = false;
};

int run(VerifyOptions opt) {
  // The emulator runs on the CPU: without an explicit problem it checks the small one.
  if (opt.emulate && !opt.problem_given) opt.problem.problem = "tiny";
  VerifyConfig cfg;
  auto p = resolve_problem(opt.problem);
  if (!p) return report_error(p.error());
  cfg.problem = *p;
  auto space = parse_space_option(opt.space);
  if (!space) return report_error(space.error());
  cfg.space = *space;
  if (!opt.target.empty())
    if (auto t = parse_target_option(opt.target); !t) return report_error(t.error());
  if (!opt.tokens.empty()) {
    auto t = parse_tokens_option(opt.tokens);
    if (!t) return report_error(t.error());
    cfg.tokens = *t;
  } else if (opt.emulate) {
    cfg.tokens = {1, 7, 33};
  }
  cfg.target = opt.target;
  cfg.emulate = opt.emulate;
  cfg.variants = opt.variants;
  cfg.device_selector = opt.device;
  cfg.seed = opt.seed;
  cfg.progress = !opt.json;
  auto r = verify_space(cfg);
  if (!r && r.error().code == Errc::no_device && !opt.emulate) {
    Error e = r.error();
    e.message += fmt::format("; without a GPU, 'flytune verify --emulate --target {}' runs the kernels on the CPU emulator",
                             opt.target.empty() ? std::string(dry_run_default_targets().front()->name) : opt.target);
    return report_error(e);
  }
  if (!r) return report_error(r.error());
  if (opt.json) {
    fmt::print("{}\n", r->to_json().dump(2));
  } else {
    fmt::print("{:<6} {:<6} {:>10} {:>10}  {}\n", "result", "tokens", "rel L2", "max abs", "check");
    for (const auto& row : r->rows)
      if (!row.passed || row.check.starts_with("align") || row.check.starts_with("reference"))
        fmt::print("{:<6} {:>6} {:>10.2e} {:>10.2e}  {}: {}\n", row.passed ? "ok" : "FAIL", row.tokens, row.rel_l2, row.max_abs,
                   row.check, row.detail);
    std::size_t variant_checks = 0;
    for (const auto& row : r->rows) variant_checks += row.check.starts_with("ft_");
    fmt::print("\n{}: {} checks ({} variant checks), {} failed, {} variants pruned (spills, no fit, serialised wgmma), {}\n", r->device,
               r->rows.size(), variant_checks, r->failures, r->skipped, format_duration(r->seconds));
  }
  return r->failures ? kExitError : kExitOk;
}

}  // namespace

Command setup_verify(CLI::App& app) {
  auto opt = std::make_shared<VerifyOptions>();
  CLI::App* sub = app.add_subcommand("verify", "Check variants against the reference on fresh inputs (GPU or --emulate)");
  add_problem_options(sub, opt->problem);
  sub->add_option("--target", opt->target, fmt::format("Target (with --emulate: any of {})", known_target_names()));
  sub->add_flag("--emulate", opt->emulate, "Run the kernels on the CPU emulator of the target's waves and matrix atoms");
  sub->add_option("--space", opt->space, "Variant space: default, wide, small, and/or axis=values;...")->capture_default_str();
  sub->add_option("--variant", opt->variants, "Only these kernel names (repeatable)");
  sub->add_option("--tokens", opt->tokens, "Token counts (default 1,7,16,64,333,512,4096; emulation 1,7,33)");
  sub->add_option("--device", opt->device, "GPU: cuda:N or hip:N (default: the first GPU)");
  sub->add_option("--seed", opt->seed, "Seed of the random inputs (default: fresh)")->check(whole_number_at_least(0));
  sub->add_flag("--json", opt->json, "Print the checks as JSON");
  sub->footer(
      "Examples:\n"
      "  flytune verify                                   # the default space on this GPU\n"
      "  flytune verify --emulate --target gfx950         # no GPU: the kernels on the CPU emulator\n"
      "  flytune verify --emulate --target sm_90a --space small --tokens 1,33");
  return {sub, [opt, sub] {
            opt->problem_given = sub->count("--problem") > 0;
            return run(*opt);
          }};
}

}  // namespace ft::cli
