// flytune search: find the fastest correct variant per token bucket on the GPU
// here (or, with --dry-run or without a GPU, generate + compile + analyse the
// space into the database), recording every result as it exists.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "cli/problem_options.hpp"
#include "tuner/device/runtimes.hpp"
#include "tuner/search/progress.hpp"
#include "tuner/search/search.hpp"

namespace ft::cli {
namespace {

struct SearchOptions {
  ProblemOptions problem;
  std::vector<std::string> targets;
  std::string tokens;
  std::string strategy = "halving";
  int budget = 0;
  double time_limit = 0;
  std::string db = "flytune.db";
  bool dry_run = false;
  bool json = false;
  bool force = false;
  bool graph = false;
  std::string space = "default";
  std::string device;
  std::string ceilings;
  std::uint64_t seed = 0;
  std::string command_line;
  bool no_baseline = false;
};

void print_summary(const SearchSummary& s, const Problem& p) {
  fmt::print("\nrun {} on {} ({} measurements, {} resumed from the database, {})\n", s.run_id, s.device, s.measurements,
             s.resumed, format_duration(s.seconds));
  fmt::print("{:<8} {:<7} {:>6} {:>8} {:>9} {:>8} {:>7} {:>9} {:>12}\n", "target", "backend", "legal", "rejected",
             "compiled", "failed", "pruned", "verified", "verify fails");
  for (const auto& t : s.targets)
    fmt::print("{:<8} {:<7} {:>6} {:>8} {:>9} {:>8} {:>7} {:>9} {:>12}\n", t.target, t.backend, t.legal, t.rejected,
               t.compiled, t.compile_failed, t.pruned, t.verified, t.verify_failed + t.crashed);
  if (!s.winners.empty()) {
    fmt::print("\nwinners for {} (median, p10-p90 in us)\n", p.key());
    fmt::print("{:>6} {:<6} {:>10} {:>19} {:>8} {:>9}  {}\n", "tokens", "kind", "median", "p10-p90", "floor%", "vs default",
               "kernel");
    for (const auto& w : s.winners)
      fmt::print("{:>6} {:<6} {:>10.1f} {:>19} {:>8} {:>9}  {}\n", w.tokens, w.kind, w.median_us,
                 fmt::format("{:.1f}-{:.1f}", w.p10_us, w.p90_us),
                 w.floor_us ? fmt::format("{:.0f}%", 100.0 * *w.floor_us / w.median_us) : "-",
                 w.speedup_vs_default ? fmt::format("{:.2f}x", *w.speedup_vs_default) : "-", w.kernel);
  }
  for (const std::string& n : s.notes) fmt::print("{}\n", n);
  fmt::print("\nresults are in {} ('flytune db --db {} winners')\n", s.db_path, s.db_path);
  if (s.interrupted) fmt::print("interrupted: everything finished before the interrupt is saved; run the same command to resume\n");
}

// The command line as typed (for the runs table), from /proc/self/cmdline.
std::string own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), out;
  for (char c : raw) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

int run(const SearchOptions& opt) {
  SearchConfig cfg;
  auto problem = resolve_problem(opt.problem);
  if (!problem) return report_error(problem.error());
  cfg.problem = *problem;
  auto strategy = parse_strategy(opt.strategy);
  if (!strategy) return report_error(strategy.error());
  cfg.strategy = *strategy;
  auto space = SpaceOptions::parse(opt.space);
  if (!space) return report_error(space.error());
  cfg.space = *space;
  if (opt.tokens.empty()) {
    cfg.tokens = default_token_buckets();
  } else {
    auto t = parse_token_list(opt.tokens);
    if (!t) return report_error(t.error());
    cfg.tokens = *t;
  }
  for (const auto& name : opt.targets)
    if (auto t = lookup_target(name); !t) return report_error(t.error());
  if (!opt.ceilings.empty()) {
    double tflops = 0, tbps = 0;
    if (std::sscanf(opt.ceilings.c_str(), "%lf,%lf", &tflops, &tbps) != 2 || tflops <= 0 || tbps <= 0)
      return report_error(Error{Errc::usage, "--ceilings takes TFLOPS,TBPS, e.g. 811,4.24", {}});
    cfg.ceilings = Ceilings{tflops * 1e12, tbps * 1e12};
  }
  cfg.budget = opt.budget;
  cfg.time_limit_s = opt.time_limit;
  cfg.db_path = opt.db;
  cfg.force = opt.force;
  cfg.graph = opt.graph;
  cfg.baseline = !opt.no_baseline;
  cfg.device_selector = opt.device;
  cfg.seed = opt.seed;
  cfg.command_line = opt.command_line;
  cfg.progress = !opt.json;
  cfg.targets = opt.targets;

  // Without --dry-run, a GPU is needed; without one, say so and do the dry run
  // (generate + compile + analyse) for the targets asked, or gfx942 and sm_90a.
  cfg.dry_run = opt.dry_run;
  if (!cfg.dry_run) {
    bool any_gpu = false;
    for (const auto& r : probe_runtimes()) any_gpu = any_gpu || !r.devices.empty();
    if (!any_gpu) {
      if (!opt.json) fmt::print(stderr, "flytune: no GPU found: doing a dry run (generate, compile, analyse, record)\n");
      cfg.dry_run = true;
    }
  }
  if (cfg.dry_run && cfg.targets.empty()) cfg.targets = {"gfx942", "sm_90a"};

  install_interrupt_handler();
  auto summary = run_search(cfg);
  if (!summary) return report_error(summary.error());
  if (opt.json) fmt::print("{}\n", summary->to_json().dump(2));
  else print_summary(*summary, cfg.problem);
  return summary->interrupted ? kExitInterrupted : kExitOk;
}

}  // namespace

Command setup_search(CLI::App& app) {
  auto opt = std::make_shared<SearchOptions>();
  CLI::App* sub = app.add_subcommand("search", "Find the fastest correct variants per token bucket and record them");
  add_problem_options(sub, opt->problem);
  sub->add_option("--target", opt->targets, "Target(s) to build; with a GPU, must match it (default: the GPU's own; "
                                            "dry run: gfx942 and sm_90a)");
  sub->add_option("--tokens", opt->tokens, "Token buckets, e.g. 1,16,64 or 1..16384 (default 1,2,4,...,16384)");
  sub->add_option("--strategy", opt->strategy, "exhaustive, random or halving")->capture_default_str();
  sub->add_option("--budget", opt->budget, "random: variants per kind and bucket");
  sub->add_option("--time-limit", opt->time_limit, "random: seconds of sampling per kind and bucket");
  sub->add_option("--db", opt->db, "SQLite database")->capture_default_str();
  sub->add_option("--space", opt->space, "Variant space: default, wide, small, and/or axis=values;...")->capture_default_str();
  sub->add_option("--device", opt->device, "GPU: cuda:N or hip:N (default: the first GPU)");
  sub->add_option("--ceilings", opt->ceilings, "Roofline ceilings TFLOPS,TBPS (default: measured table for known GPUs)");
  sub->add_option("--seed", opt->seed, "Seed of the random inputs (default: fresh)");
  sub->add_flag("--no-baseline", opt->no_baseline,
                "Search only --space: leave out the default variant that speedups are measured against");
  sub->add_flag("--dry-run", opt->dry_run, "Generate, compile, analyse and record only (no GPU needed)");
  sub->add_flag("--force", opt->force, "Measure again what the database already has");
  sub->add_flag("--graph", opt->graph, "Time the whole layer by CUDA/HIP graph replay");
  sub->add_flag("--json", opt->json, "Print the summary as JSON");
  return {sub, [opt] {
            opt->command_line = own_command_line();
            return run(*opt);
          }};
}

}  // namespace ft::cli
