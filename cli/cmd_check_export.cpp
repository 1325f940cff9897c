// flytune check-export DIR: an export run through libflytune_runtime on fresh
// inputs at every bucket, between and above them, under several routings,
// against the reference kernels (runtime/check/check_export.hpp). On the GPU,
// or with --emulate on the CPU emulator (the manifest's steps, kernels rebuilt
// from its variants). Exit 1 when any row fails.
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "generator/problem.hpp"
#include "runtime/check/check_export.hpp"

namespace ft::cli {
namespace {

struct CheckExportOptions {
  std::string dir;
  bool emulate = false;
  std::string device;
  std::string problem;
  std::string tokens;
  std::vector<std::string> routings{"uniform", "hot", "zipf", "one-empty", "masked"};
  std::uint64_t seed = 0x5eed;
};

int run_check_export(const CheckExportOptions& opt) {
  check::CheckOptions co;
  co.dir = opt.dir;
  co.emulate = opt.emulate;
  co.device = opt.device;
  if (!opt.problem.empty()) co.problem = opt.problem;
  if (!opt.tokens.empty()) {
    auto t = parse_token_list(opt.tokens);
    if (!t) return report_error(with_context(t.error(), "--tokens"));
    co.tokens = *t;
  }
  co.routings = opt.routings;
  co.seed = opt.seed;
  auto report = check::check_export(co);
  if (!report) return report_error(report.error());
  fmt::print("{}", report->table());
  for (const std::string& n : report->coverage_notes) fmt::print("coverage: {}\n", n);
  const int failures = report->failures();
  // The emulator's device name already says its target ("CPU emulator (sm_90a)").
  const std::string target_note = fmt::format(" ({})", report->target);
  const std::string where = report->device.ends_with(target_note) ? report->device : report->device + target_note;
  fmt::print("check-export: {} of {} checks passed on {}{}\n", report->rows.size() - std::size_t(failures),
             report->rows.size(), where,
             report->own_objects ? "" : "; the manifest's steps ran on kernels rebuilt for the emulator, not its code objects");
  return failures ? kExitError : kExitOk;
}

}  // namespace

Command setup_check_export(CLI::App& app) {
  auto opt = std::make_shared<CheckExportOptions>();
  CLI::App* sub = app.add_subcommand(
      "check-export", "Run an export through the runtime on fresh inputs and routings against the reference");
  sub->add_option("dir", opt->dir, "Export folder (written by flytune export)")->required();
  sub->add_flag("--emulate", opt->emulate,
                "Run on the CPU emulator: kernels rebuilt from the manifest's variants, the manifest's own steps");
  sub->add_option("--device", opt->device, "GPU to run on (cuda:0, hip:1); default: the first GPU");
  sub->add_option("--problem", opt->problem, "Only this problem key");
  sub->add_option("--tokens", opt->tokens,
                  "Token counts (\"1,17,333\"); default: each bucket, odd T below and between buckets, T above the largest");
  sub->add_option("--routing", opt->routings, "Routings to check: uniform, hot, zipf, one-empty, masked")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--seed", opt->seed, "Seed of the inputs")->capture_default_str();
  sub->footer("Examples:\n"
              "  flytune check-export tuned                  # on this machine's GPU\n"
              "  flytune check-export tuned --emulate --routing uniform,masked --tokens 1,33");
  return {sub, [opt] { return run_check_export(*opt); }};
}

}  // namespace ft::cli
