// flytune export: the tuned layer winners of a database as a folder the
// runtime (runtime/) or any host can load: manifest.json, code objects named by
// content hash, flytune_dispatch.h. With --check-coverage: which token counts
// have no tuned winner and what the runtime does for them.
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "cli/problem_options.hpp"
#include "db/export/export.hpp"
#include "generator/problem.hpp"

namespace ft::cli {
namespace {

struct ExportOptions {
  std::string db = "./flytune.db";
  std::string out;
  std::string target;
  std::string device;
  bool check_coverage = false;
  std::string tokens = "1..16384";
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
    else
      fmt::print("  T={:<6} NOT TUNED: runtime uses bucket T={} ({})\n", l.tokens, *l.bucket,
                 l.rule == "next bucket up" ? "next bucket up" : "largest bucket; T is above every tuned bucket");
  }
  for (const std::string& s : rep->incomplete_buckets) fmt::print("incomplete: {} (not exported)\n", s);
  fmt::print("coverage: {} of {} requested (problem, T) have a tuned layer winner; {} use the rule "
             "'smallest tuned bucket >= T, else the largest'\n",
             rep->lines.size() - std::size_t(rep->untuned()), rep->lines.size(), rep->untuned());
  return kExitOk;
}

int run_export(const ExportOptions& opt) {
  if (opt.check_coverage) return run_coverage(opt);
  if (opt.out.empty()) return report_error(Error{Errc::usage, "--out DIR is required (or pass --check-coverage)", "export"});
  db::ExportOptions eo{opt.db, opt.out, optional_text(opt.target), optional_text(opt.device)};
  auto s = db::export_winners(eo);
  if (!s) return report_error(s.error());
  for (const std::string& n : s->notes) fmt::print("note: {}\n", n);
  fmt::print("exported {} problem(s), {} bucket(s), {} code object(s) for {} on {}\n", s->problems, s->buckets,
             s->code_objects, s->target, s->device);
  fmt::print("  {}\n  {}\n", s->manifest_path, s->header_path);
  return kExitOk;
}

}  // namespace

Command setup_export(CLI::App& app) {
  auto opt = std::make_shared<ExportOptions>();
  CLI::App* sub = app.add_subcommand("export", "Write tuned layer winners as manifest.json + code objects + a C dispatch header");
  sub->add_option("--db", opt->db, "Database file (opened read-only)")->capture_default_str();
  sub->add_option("--out", opt->out, "Folder to write (created if missing)");
  sub->add_option("--target", opt->target, "Only winners of this target (sm_90a, gfx942, ...)");
  sub->add_option("--device", opt->device, "Only winners measured on a device of this name (\"NVIDIA H200\")");
  sub->add_flag("--check-coverage", opt->check_coverage, "Report token counts without a tuned winner instead of exporting");
  sub->add_option("--tokens", opt->tokens, "Token counts for --check-coverage (\"1..16384\" = powers of two)")
      ->capture_default_str();
  sub->footer(
      "Examples:\n"
      "  flytune export --db flytune.db --out export/h200\n"
      "  flytune export --db runs/h200.db --out export/h200 --target sm_90a --device \"NVIDIA H200\"\n"
      "  flytune export --db flytune.db --check-coverage --tokens 1..4096");
  return {sub, [opt] { return run_export(*opt); }};
}

}  // namespace ft::cli
