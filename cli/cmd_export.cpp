// flytune export: the tuned layer winners of a database as a folder the
// runtime (runtime/) or any host can load: manifest.json, code objects named by
// content hash, flytune_dispatch.h. Before the folder takes its place the
// export runs through the runtime on the GPU it was tuned on (check-export);
// a failing bucket leaves nothing written. With --check-coverage: which token
// counts have no tuned winner and what the runtime does for them.
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "cli/problem_options.hpp"
#include "export/export.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "runtime/check/check_export.hpp"

namespace ft::cli {
namespace {

struct ExportOptions {
  std::string db = "./flytune.db";
  std::string out;
  std::string target;
  std::string device;
  std::string problem;  // a preset name or a problem key
  bool check_coverage = false;
  std::string tokens = "1..16384";
  bool force = false;
  bool allow_missing = false;  // export although buckets lack a layer winner
  std::string check = "auto";  // auto, gpu, emulate, none
  bool no_check = false;
  std::string check_tokens;    // empty: check-export's default T values
  std::vector<std::string> check_routings{"uniform", "hot", "zipf", "one-empty", "masked"};
};

std::optional<std::string> optional_text(const std::string& s) {
  return s.empty() ? std::nullopt : std::optional<std::string>(s);
}

int run_coverage(const ExportOptions& opt) {
  auto tokens = parse_tokens_option(opt.tokens);
  if (!tokens) return report_error(tokens.error());
  auto rep = db::check_coverage(opt.db, *tokens, optional_text(opt.target), optional_text(opt.device));
  if (!rep) return report_error(rep.error());
  if (rep->lines.empty()) {
    fmt::print("coverage: the database has no winners{}; the runtime has nothing to serve\n",
               opt.target.empty() && opt.device.empty() ? "" : " matching --target/--device");
    return kExitOk;
  }
  std::string current;
  for (const db::CoverageLine& l : rep->lines) {
    const std::string head = l.problem_key + " on " + l.device;
    if (head != current) {
      current = head;
      fmt::print("{}\n", head);
    }
    if (!l.bucket) fmt::print("  T={:<6} NOT TUNED: no layer winner; the runtime refuses this problem\n", l.tokens);
    else if (l.rule == "tuned") fmt::print("  T={:<6} tuned\n", l.tokens);
    else if (l.missing_bucket)
      fmt::print("  T={:<6} MISSING LAYER: bucket T={} has stage winners but no layer winner; runtime uses bucket T={}\n",
                 l.tokens, *l.missing_bucket, *l.bucket);
    else
      fmt::print("  T={:<6} NOT TUNED: runtime uses bucket T={} ({})\n", l.tokens, *l.bucket,
                 l.rule == "next bucket up" ? "next bucket up" : "largest bucket; T is above every tuned bucket");
  }
  for (const std::string& s : rep->incomplete_buckets)
    fmt::print("missing layer: {} (export refuses it unless --allow-missing)\n", s);
  fmt::print("coverage: {} of {} requested (problem, T) have a tuned layer winner; {} use the rule "
             "'smallest tuned bucket >= T, else the largest'\n",
             rep->lines.size() - std::size_t(rep->untuned()), rep->lines.size(), rep->untuned());
  return kExitOk;
}

// The staged manifest's code_object_format ("" when unreadable: the check says why).
std::string object_format_of(const std::string& dir) {
  std::ifstream f(std::filesystem::path(dir) / "manifest.json");
  const nlohmann::json m = nlohmann::json::parse(f, nullptr, false);
  return m.is_object() && m.contains("code_object_format") && m["code_object_format"].is_string()
             ? m["code_object_format"].get<std::string>()
             : "";
}

// The check run on the staged export; `outcome` says what happened for the summary.
std::function<Status(const std::string&)> export_check(const ExportOptions& opt, std::string& outcome) {
  const std::string mode = opt.no_check ? "none" : opt.check;
  if (mode == "none") {
    outcome = "not checked (--no-check): run 'flytune check-export DIR' before trusting it";
    return {};
  }
  return [mode, &opt, &outcome](const std::string& dir) -> Status {
    check::CheckOptions co;
    co.dir = dir;
    // auto: an export of a search on the emulator holds host libraries, which only the emulator runs.
    co.emulate = mode == "emulate" || (mode == "auto" && object_format_of(dir) == "so");
    co.routings = opt.check_routings;
    if (!opt.check_tokens.empty()) co.tokens = FT_TRY(parse_token_list(opt.check_tokens));
    auto report = check::check_export(co);
    if (!report && report.error().code == Errc::no_device && mode == "auto") {
      outcome = "not checked: no GPU of the export's target here; run 'flytune check-export DIR' on one (or --check emulate)";
      return {};
    }
    if (!report) return std::unexpected(with_context(report.error(), "check-export"));
    const int failures = report->failures();
    if (failures) {
      fmt::print("{}", report->table());
      return fail(Errc::verify, fmt::format("{} of {} checks through the runtime failed on {}; nothing was written",
                                            failures, report->rows.size(), report->device));
    }
    outcome = fmt::format("checked through the runtime on {}: {} of {} checks passed", report->device, report->rows.size(),
                          report->rows.size());
    return {};
  };
}

int run_export(const ExportOptions& opt) {
  if (opt.check_coverage) return run_coverage(opt);
  if (opt.out.empty()) return report_error(Error{Errc::usage, "--out DIR is required (or pass --check-coverage)", "export"});
  std::string outcome;
  db::ExportOptions eo{opt.db, opt.out, optional_text(opt.target), optional_text(opt.device), opt.force,
                       export_check(opt, outcome)};
  eo.allow_missing = opt.allow_missing;
  // A preset's name stands for its key (with the default dtype and routing).
  if (!opt.problem.empty()) eo.problem = problem_from_preset(opt.problem) ? problem_from_preset(opt.problem)->key() : opt.problem;
  auto s = db::export_winners(eo);
  if (!s) return report_error(s.error());
  for (const std::string& n : s->notes) fmt::print("note: {}\n", n);
  if (!s->missing.empty())
    fmt::print("missing layers (--allow-missing): {}; the runtime serves their T with another bucket's kernels and says so "
               "(ft_plan_coverage)\n", fmt::join(s->missing, ", "));
  fmt::print("exported {} problem(s), {} bucket(s), {} backward bucket(s), {} code object(s) for {} on {}\n", s->problems,
             s->buckets, s->backward_buckets, s->code_objects, s->target, s->device);
  fmt::print("  {}\n  {}\n  {}\n", s->manifest_path, s->header_path, outcome);
  return kExitOk;
}

}  // namespace

Command setup_export(CLI::App& app) {
  auto opt = std::make_shared<ExportOptions>();
  CLI::App* sub = app.add_subcommand("export", "Write tuned layer winners as manifest.json + code objects + a C dispatch header");
  sub->add_option("--db", opt->db, "Database file (opened read-only)")->capture_default_str();
  sub->add_option("--out", opt->out, "Folder to write (created; one that holds files needs --force)");
  sub->add_flag("--force", opt->force, "Replace what --out holds (the new export takes its place in one rename)");
  sub->add_option("--check", opt->check,
                  "Run the export through the runtime before writing it: auto (on this machine's GPU of the target, "
                  "else say it was not checked; an export of search --emulate on the emulator), gpu (required), "
                  "emulate (CPU emulator), none")
      ->check(CLI::IsMember({"auto", "gpu", "emulate", "none"}))
      ->capture_default_str();
  sub->add_flag("--no-check", opt->no_check, "Same as --check none");
  sub->add_flag("--allow-missing", opt->allow_missing,
                "Export although token buckets have stage winners but no layer winner (refused otherwise; the manifest "
                "lists them as missing_buckets)");
  sub->add_option("--check-tokens", opt->check_tokens, "Token counts of the check (default: as check-export)");
  sub->add_option("--check-routing", opt->check_routings, "Routings of the check (default: all five)")
      ->delimiter(',')
      ->capture_default_str();
  sub->add_option("--target", opt->target, fmt::format("Only winners of this target ({})", known_target_names(" or ")));
  sub->add_option("--device", opt->device, "Only winners measured on a device of this name (\"NVIDIA H200\")");
  sub->add_option("--problem", opt->problem,
                  "Only winners of this problem: a preset name (mixtral-8x7b) or a problem key (flytune db winners lists them)");
  sub->add_flag("--check-coverage", opt->check_coverage, "Report token counts without a tuned winner instead of exporting");
  sub->add_option("--tokens", opt->tokens, "Token counts for --check-coverage (\"1..16384\" = powers of two)")
      ->capture_default_str();
  sub->footer(
      "Examples:\n"
      "  flytune export --db flytune.db --out export/h200\n"
      "  flytune export --db flytune.db --out export/h200 --force --check gpu\n"
      "  flytune export --db runs/h200.db --out export/h200 --target sm_90a --device \"NVIDIA H200\"\n"
      "  flytune export --db flytune.db --check-coverage --tokens 1..4096");
  return {sub, [opt] { return run_export(*opt); }};
}

}  // namespace ft::cli
