// flytune search: find the fastest correct variant per token bucket on the GPU
// here (or, with --dry-run or without a GPU, generate + compile + analyse the
// space into the database; or, with --emulate, the whole search on the CPU
// emulator of --target), recording every result as it exists.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "cli/option_checks.hpp"
#include "cli/problem_options.hpp"
#include "generator/target.hpp"
#include "device/runtimes.hpp"
#include "search/backward_search.hpp"
#include "search/progress.hpp"
#include "search/search.hpp"
#include "search/shard.hpp"
#include "search/strategy.hpp"
#include "store/kind.hpp"
#include "measure/worker/worker_device.hpp"

namespace ft::cli {
namespace {

struct SearchOptions {
  ProblemOptions problem;
  std::vector<std::string> targets;
  std::string tokens;
  std::string shard;  // "I/N": this search's share of the token buckets
  std::string strategy{default_strategy()};
  int budget = 0;
  double time_limit = 0;
  double model_budget = 4;
  int model_explore = 4;
  std::string db = "flytune.db";
  bool dry_run = false;
  bool json = false;
  bool progress = false;  // --progress: progress lines on stderr with --json too
  bool force = false;
  bool graph = false;
  std::string space = "default";
  std::string device;
  std::string devices;  // "all" or "cuda:0,cuda:1"
  bool allow_mixed = false;
  bool allow_missing = false;  // buckets without a layer winner do not fail the search
  std::string ceilings;
  std::uint64_t seed = 0;
  std::string command_line;
  bool no_baseline = false;
  bool emulate = false;
  bool in_process = false;
  bool problem_given = false;
  std::string pass = "forward";  // forward, backward or both
};

// --emulate (or an emu: --device): the worker on the CPU emulator of the one
// target, the variants built by the host compiler (Backend::emulate). Sets
// the config's targets, device and backend; a usage error when the options
// contradict each other.
Status configure_emulation(const SearchOptions& opt, SearchConfig& cfg) {
  if (opt.dry_run)
    return fail(Errc::usage, "--emulate runs the search on the CPU emulator and --dry-run only compiles; give one of them");
  std::string target;
  if (!opt.device.empty()) {
    if (!is_emu_selector(opt.device))
      return fail(Errc::usage, fmt::format("--device {} is a GPU; --emulate runs on emu:<target> or emu:<target>:<n>",
                                           shorten(opt.device)));
    auto sel = parse_emu_selector(opt.device);
    if (!sel) return std::unexpected(as_usage(sel.error(), "--device"));
    target = std::string(sel->target->name);
  }
  if (opt.targets.size() > 1) return fail(Errc::usage, "--emulate searches one target; give one --target");
  if (!opt.targets.empty()) {
    if (!target.empty() && opt.targets.front() != target)
      return fail(Errc::usage, fmt::format("--target {} does not match --device {}", opt.targets.front(), opt.device));
    target = opt.targets.front();
  }
  // --devices emu:<target>:0,emu:<target>:1: several emulated devices of one target.
  for (const std::string& sel : cfg.devices) {
    auto parsed = parse_emu_selector(sel);
    if (!parsed) return std::unexpected(as_usage(parsed.error(), "--devices"));
    if (!target.empty() && parsed->target->name != target)
      return fail(Errc::usage, fmt::format("--devices {}: the emulated devices of one search share one target ({})", sel,
                                           target));
    target = std::string(parsed->target->name);
  }
  if (target.empty()) return fail(Errc::usage, fmt::format("--emulate needs --target ({})", known_target_names(" or ")));
  cfg.targets = {target};
  if (cfg.devices.empty()) cfg.devices = {opt.device.empty() ? fmt::format("emu:{}", target) : opt.device};
  cfg.compile.backend = Backend::emulate;
  return {};
}

// What a dry run did and what to try next: it times nothing, so it records no winners.
void print_dry_run_ending(const SearchSummary& s) {
  std::string targets;
  std::size_t objects = 0;
  for (const auto& t : s.targets) {
    targets += (targets.empty() ? "" : ", ") + t.target;
    objects += t.compiled;
  }
  const std::string first = s.targets.empty() ? std::string(dry_run_default_targets().front()->name) : s.targets.front().target;
  fmt::print("\ndry run: generated, compiled and analysed {} variants for {}; recorded in {} (no timings, so no winners)\n",
             objects, targets.empty() ? "no target" : targets, s.db_path);
  const std::vector<std::pair<std::string, std::string>> next{
      {fmt::format("flytune db --db {} variants", s.db_path), "what compiled, with registers, LDS and occupancy"},
      {fmt::format("flytune verify --emulate --target {}", first), "run the kernels on the CPU and check them"},
      {fmt::format("flytune compile --target {} --out out", first), "the code objects and index.json"}};
  std::size_t width = 0;
  for (const auto& [command, what] : next) width = std::max(width, command.size());
  fmt::print("next:\n");
  for (const auto& [command, what] : next) fmt::print("  {:<{}}  # {}\n", command, width, what);
  fmt::print("timing and winners need a GPU: run 'flytune search' on a machine with one\n");
}

void print_summary(const SearchSummary& s, const Problem& p) {
  std::size_t cache_hits = 0, objects = 0;
  for (const auto& t : s.targets) {
    cache_hits += t.cache_hits;
    objects += t.compiled + 1;  // + the support unit
  }
  const std::string cached = fmt::format("{} of {} code objects from the compile cache", cache_hits, objects);
  if (s.dry_run)
    fmt::print("\nrun {}, dry run (compile only): {}, {}\n", s.run_id, cached, format_duration(s.seconds));
  else
    fmt::print("\nrun {} on {}: {} measurements, {} taken from the database instead of measured again, {}, {}\n", s.run_id,
               s.device, s.measurements, s.resumed, cached, format_duration(s.seconds));
  if (s.gpus.size() > 1)
    for (const GpuSummary& g : s.gpus)
      fmt::print("  {} ({}, PCI {}): verified {} variant(s); buckets {}{}{}\n", g.selector, g.name, g.pci_bus_id, g.verified,
                 g.buckets.empty() ? "none" : fmt::format("{}", fmt::join(g.buckets, ", ")),
                 g.crashes ? fmt::format("; its worker died or hung {} time(s)", g.crashes) : "",
                 g.dead ? "; the worker could not be restarted, its work went to the other GPUs" : "");
  fmt::print("{:<8} {:<7} {:>6} {:>8} {:>9} {:>8} {:>7} {:>9} {:>12}\n", "target", "backend", "legal", "rejected",
             "compiled", "failed", "pruned", "verified", "verify fails");
  for (const auto& t : s.targets)
    fmt::print("{:<8} {:<7} {:>6} {:>8} {:>9} {:>8} {:>7} {:>9} {:>12}\n", t.target, t.backend, t.legal, t.rejected,
               t.compiled, t.compile_failed, t.pruned, t.verified, t.verify_failed + t.crashed);
  for (const auto& t : s.targets)
    if (t.defaults_added)
      fmt::print("{}: {}the {} default variant(s) (the speedup baseline) were built beside the space{}\n", t.target,
                 t.legal == 0 ? "the space holds no legal variant; " : "", t.defaults_added,
                 t.legal == 0 ? "; see 'flytune generate --show-rejected' for why" : "");
  if (!s.winners.empty()) {
    fmt::print("\nwinners for {} (median, p10-p90 in us)\n", p.key());
    fmt::print("{:>6} {:<6} {:>10} {:>19} {:>8} {:>9}  {}\n", "tokens", "kind", "median", "p10-p90", "floor%", "vs default",
               "kernel");
    for (const auto& w : s.winners)
      fmt::print("{:>6} {:<6} {:>10.1f} {:>19} {:>8} {:>9}  {}\n", w.tokens,
                 w.pass == db::to_string(db::Pass::forward) ? w.kind : w.pass + " " + w.kind, w.median_us,
                 fmt::format("{:.1f}-{:.1f}", w.p10_us, w.p90_us),
                 w.floor_us ? fmt::format("{:.0f}%", 100.0 * *w.floor_us / w.median_us) : "-",
                 w.speedup_vs_default ? fmt::format("{:.2f}x", *w.speedup_vs_default) : "-", w.kernel);
  }
  for (const auto& n : s.notes) fmt::print("note: {}\n", n);
  if (!s.missing_layers.empty()) {
    std::vector<std::string> buckets;
    for (const MissingLayer& m : s.missing_layers) buckets.push_back(fmt::format("T={}", m.tokens));
    fmt::print("\nmissing layers: {} ended without a layer winner (the notes say why); an export would serve {} with "
               "another bucket's kernels\n",
               fmt::join(buckets, ", "), buckets.size() == 1 ? "it" : "them");
  }
  if (s.interrupted) {
    fmt::print("interrupted: everything finished before the interrupt is saved in {}; run the same command to resume\n",
               s.db_path);
    return;
  }
  if (s.dry_run) print_dry_run_ending(s);
  else fmt::print("\nresults are in {} ('flytune db --db {} winners')\n", s.db_path, s.db_path);
}

// The workers' selectors: --device (one GPU), --devices all (every GPU the
// runtimes list) or --devices cuda:0,cuda:1; empty: the first GPU found.
Result<std::vector<std::string>> resolve_devices(const SearchOptions& opt) {
  if (opt.devices.empty()) {
    if (opt.allow_mixed) return fail(Errc::usage, "--allow-mixed needs --devices");
    return opt.device.empty() ? std::vector<std::string>{} : std::vector<std::string>{opt.device};
  }
  if (!opt.device.empty()) return fail(Errc::usage, "--device and --devices name the GPUs twice; use one of them");
  std::vector<std::string> out;
  if (opt.devices == "all") {
    for (const RuntimeReport& r : probe_runtimes())
      for (const DeviceInfo& d : r.devices) out.push_back(device_selector(d));
    if (out.empty()) return fail(Errc::no_device, "--devices all: no GPU found ('flytune devices' says why)");
    return out;
  }
  std::string_view rest = opt.devices;
  while (true) {
    const std::size_t comma = rest.find(',');
    const std::string item(rest.substr(0, comma));
    const std::size_t colon = item.find(':');
    const std::string_view runtime = std::string_view(item).substr(0, colon);
    const std::string_view ordinal = colon == std::string::npos ? "" : std::string_view(item).substr(colon + 1);
    const bool number = !ordinal.empty() && ordinal.size() < 6 &&
                        std::all_of(ordinal.begin(), ordinal.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (runtime == "emu") {
      if (auto st = check_worker_selector(item); !st) return std::unexpected(as_usage(st.error(), "--devices"));
    } else if (!((runtime == "cuda" || runtime == "hip") && number))
      return fail(Errc::usage, fmt::format("--devices: '{}' is not a GPU; use 'all' or a list such as cuda:0,cuda:1 "
                                           "(hip:N on AMD)", escape_control(item, false)));
    if (std::find(out.begin(), out.end(), item) != out.end())
      return fail(Errc::usage, fmt::format("--devices names {} twice", item));
    out.push_back(item);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  const auto emulated = std::count_if(out.begin(), out.end(), [](const std::string& d) { return d.starts_with("emu:"); });
  if (emulated > 0 && emulated < std::ptrdiff_t(out.size()))
    return fail(Errc::usage, "--devices mixes GPUs and emulated devices; a search runs on one or the other");
  return out;
}

// "811,4.24": two finite positive numbers (TFLOPS, TB/s).
Result<Ceilings> parse_ceilings(const std::string& text) {
  auto comma = text.find(',');
  auto number = [](std::string_view s) -> std::optional<double> {
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc{} || end != s.data() + s.size() || !std::isfinite(v) || v <= 0) return std::nullopt;
    return v;
  };
  std::optional<double> tflops, tbps;
  if (comma != std::string::npos) {
    tflops = number(std::string_view(text).substr(0, comma));
    tbps = number(std::string_view(text).substr(comma + 1));
  }
  if (!tflops || !tbps)
    return fail(Errc::usage, fmt::format("'{}' is not TFLOPS,TBPS (two finite positive numbers), e.g. 811,4.24", shorten(text)),
                "--ceilings");
  return Ceilings{*tflops * 1e12, *tbps * 1e12};
}

// The command line as typed (for the runs table), from /proc/self/cmdline.
std::string own_command_line() {
  std::ifstream f("/proc/self/cmdline", std::ios::binary);
  std::string raw((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>()), out;
  for (char c : raw) out += c == '\0' ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

int run(SearchOptions opt) {
  SearchConfig cfg;
  const bool emulate = opt.emulate || is_emu_selector(opt.device) || opt.devices.starts_with("emu:");
  // The emulator runs on the CPU: without an explicit problem it searches the small one.
  if (emulate && !opt.problem_given) opt.problem.problem = "tiny";
  auto problem = resolve_problem(opt.problem);
  if (!problem) return report_error(problem.error());
  cfg.problem = *problem;
  if (auto st = check_strategy(opt.strategy); !st) return report_error(as_usage(st.error(), "--strategy"));
  cfg.strategy = opt.strategy;
  auto space = parse_space_option(opt.space);
  if (!space) return report_error(space.error());
  cfg.space = *space;
  if (opt.tokens.empty()) {
    cfg.tokens = emulate ? std::vector<int>{1, 7, 33} : default_token_buckets();
  } else {
    auto t = parse_tokens_option(opt.tokens);
    if (!t) return report_error(t.error());
    cfg.tokens = *t;
  }
  if (!opt.shard.empty()) {
    auto shard = parse_shard(opt.shard);
    if (!shard) return report_error(shard.error());
    const std::size_t all = cfg.tokens.size();
    cfg.tokens = shard_tokens(cfg.tokens, *shard);
    cfg.shard = shard->label();
    if (cfg.tokens.empty()) {
      if (opt.json) fmt::print("{}\n", nlohmann::json{{"shard", cfg.shard}, {"tokens", nlohmann::json::array()}}.dump(2));
      else fmt::print("shard {} has no token buckets ({} bucket(s) in {} shards): nothing to search\n", cfg.shard,
                      all, shard->count);
      return kExitOk;
    }
  }
  for (const auto& name : opt.targets)
    if (auto t = parse_target_option(name); !t) return report_error(t.error());
  if (!opt.ceilings.empty()) {
    auto c = parse_ceilings(opt.ceilings);
    if (!c) return report_error(c.error());
    cfg.ceilings = *c;
  }
  if (auto cache = check_cache_dir(cfg.compile.cache_dir); !cache)
    fmt::print(stderr, "flytune: warning: {}; compiling without the cache (set FLYTUNE_CACHE_DIR to a writable folder, "
                       "or to 'none')\n", escape_control(cache.error().describe(), false));
  cfg.budget = opt.budget;
  cfg.time_limit_s = opt.time_limit;
  cfg.model_budget_s = opt.model_budget;
  cfg.model_explore = opt.model_explore;
  cfg.db_path = opt.db;
  cfg.force = opt.force;
  cfg.graph = opt.graph;
  cfg.baseline = !opt.no_baseline;
  auto devices = resolve_devices(opt);
  if (!devices) return report_error(devices.error());
  cfg.devices = *devices;
  cfg.allow_mixed = opt.allow_mixed;
  cfg.in_process = opt.in_process;
  cfg.seed = opt.seed;
  cfg.command_line = opt.command_line;
  cfg.progress = !opt.json || opt.progress;
  cfg.targets = opt.targets;
  if (emulate) {
    if (auto st = configure_emulation(opt, cfg); !st) return report_error(st.error());
  } else if (auto st = check_worker_selector(opt.device); !st) {
    return report_error(as_usage(st.error(), "--device"));
  }

  // Without --dry-run, a GPU is needed; without one, say so and do the dry run
  // (generate + compile + analyse) for the targets asked, or the table's dry-run defaults.
  cfg.dry_run = opt.dry_run;
  if (opt.in_process && opt.dry_run)
    return report_error(Error{Errc::usage, "--in-process measures and --dry-run only compiles; give one of them", {}});
  if (!cfg.dry_run && !emulate) {
    bool any_gpu = false;
    for (const auto& r : probe_runtimes()) any_gpu = any_gpu || !r.devices.empty();
    if (!any_gpu) {
      if (!opt.json) fmt::print(stderr, "flytune: no GPU found: doing a dry run (generate, compile, analyse, record)\n");
      cfg.dry_run = true;
    }
  }
  if (cfg.dry_run && cfg.targets.empty())
    for (const Target* t : dry_run_default_targets()) cfg.targets.emplace_back(t->name);
  if (opt.pass == "backward") cfg.passes = {db::Pass::backward};
  if (opt.pass == "both") cfg.passes = {db::Pass::forward, db::Pass::backward};
  if (opt.pass != "forward")
    if (auto st = check_backward_config(cfg); !st) return report_error(st.error());

  install_interrupt_handler();
  auto summary = run_search(cfg);
  if (!summary) return report_error(summary.error());
  if (opt.json) fmt::print("{}\n", summary->to_json().dump(2));
  else print_summary(*summary, cfg.problem);
  if (summary->interrupted) return kExitInterrupted;
  if (!summary->missing_layers.empty() && !opt.allow_missing) {
    std::fflush(stdout);  // the summary first, also when both streams go to one file
    fmt::print(stderr, "flytune: error: {} token bucket(s) without a layer winner (listed above); exit {}, or pass "
                       "--allow-missing to accept them\n", summary->missing_layers.size(), kExitMissingLayers);
    return kExitMissingLayers;
  }
  return kExitOk;
}

}  // namespace

Command setup_search(CLI::App& app) {
  auto opt = std::make_shared<SearchOptions>();
  CLI::App* sub = app.add_subcommand("search", "Find the fastest correct variants per token bucket and record them");
  add_problem_options(sub, opt->problem);
  sub->add_option("--target", opt->targets,
                  fmt::format("Target(s) to build: {}; with a GPU, must match it (default: the GPU's own; dry run: {})",
                              known_target_names(" or "), dry_run_default_names()));
  sub->add_option("--tokens", opt->tokens, "Token buckets, e.g. 1,16,64 or 1..16384 (default 1,2,4,...,16384)");
  sub->add_option("--shard", opt->shard,
                  "Search only shard I of N (0 <= I < N): the buckets whose index in the sorted list is I mod N");
  sub->add_option("--strategy", opt->strategy, fmt::format("How each bucket's variants are timed: {}", strategy_help()))
      ->capture_default_str();
  sub->add_option("--budget", opt->budget,
                  "random: variants per kind and bucket; --pass backward: configurations per role (0: all)")
      ->check(whole_number_at_least(0));
  sub->add_option("--time-limit", opt->time_limit, "random: seconds of sampling per kind and bucket (0: none)")
      ->check(finite_seconds());
  sub->add_option("--model-budget", opt->model_budget,
                  "model: seconds of short timing per kind and bucket; the model's fastest that fit are timed")
      ->check(finite_seconds())
      ->capture_default_str();
  sub->add_option("--model-explore", opt->model_explore, "model: candidates drawn at random beside the model's fastest")
      ->check(whole_number_at_least(0))
      ->capture_default_str();
  sub->add_option("--db", opt->db, "SQLite database")->capture_default_str();
  sub->add_option("--space", opt->space, "Variant space: default, wide, small, and/or axis=values;...")->capture_default_str();
  sub->add_option("--device", opt->device,
                  "GPU: cuda:N or hip:N (default: the first GPU); emu:<target>[:<n>]: the CPU emulator (implies --emulate)");
  sub->add_option("--devices", opt->devices,
                  "Several GPUs, one worker each: 'all' or a list such as cuda:0,cuda:1 (or emu:sm_90a:0,emu:sm_90a:1); "
                  "variants and token buckets are dealt among them");
  sub->add_flag("--allow-mixed", opt->allow_mixed,
                "With --devices: allow GPUs of different models (each model gets winners of its own)");
  sub->add_flag("--allow-missing", opt->allow_missing,
                "Exit 0 even when token buckets end without a layer winner (otherwise exit 4; the summary lists them)");
  sub->add_option("--ceilings", opt->ceilings, "Roofline ceilings TFLOPS,TBPS (default: measured table for known GPUs)");
  sub->add_option("--seed", opt->seed, "Seed of the random inputs (default: fresh)")->check(whole_number_at_least(0));
  sub->add_flag("--no-baseline", opt->no_baseline,
                "Search only --space: leave out the default variant that speedups are measured against");
  sub->add_flag("--dry-run", opt->dry_run, "Generate, compile, analyse and record only (no GPU needed)");
  sub->add_flag("--emulate", opt->emulate,
                "The whole search on the CPU emulator of --target: verify, time, pair, record winners (no GPU needed; "
                "default problem tiny, tokens 1,7,33)");
  sub->add_flag("--in-process", opt->in_process,
                "Measure in this process, not in a worker process per device: no crash isolation and no watchdog (a "
                "kernel that faults or hangs ends the search); for --emulate and tests");
  sub->add_option("--pass", opt->pass,
                  "forward (the default), backward (the backward program, on one device: a GPU or --emulate) or both")
      ->check(CLI::IsMember({"forward", "backward", "both"}));
  sub->add_flag("--force", opt->force, "Measure again what the database already has");
  sub->add_flag("--graph", opt->graph, "Time the whole layer by CUDA/HIP graph replay");
  sub->add_flag("--json", opt->json, "Print the summary as JSON");
  sub->add_flag("--progress", opt->progress,
                "Progress and ETA on stderr with --json too (a log of a long search; the JSON stays on stdout)");
  sub->footer(
      "Examples:\n"
      "  flytune search                                  # Mixtral 8x7B on this GPU (a dry run without one)\n"
      "  flytune search --dry-run --target gfx942 --space small\n"
      "  flytune search --problem deepseek-v3 --tokens 1..4096 --strategy exhaustive\n"
      "  flytune search --strategy random --budget 20 --seed 7 --db runs/h200.db\n"
      "  flytune search --problem deepseek-v3 --strategy model --db runs/h200.db   # time what the cost model picks\n"
      "  flytune search --devices all                     # every GPU of this machine, one worker each\n"
      "  flytune search --shard 0/4 --db shard-0.db       # one of 4 machines; then flytune db merge\n"
      "  flytune search --emulate --target sm_90a --space small --tokens 1,7   # no GPU: on the CPU emulator");
  return {sub, [opt, sub] {
            opt->command_line = own_command_line();
            opt->problem_given = sub->count("--problem") > 0;
            return run(*opt);
          }};
}

}  // namespace ft::cli
