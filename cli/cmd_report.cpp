// flytune report: CI regression reports. Baseline against current database
// (--baseline A.db --current B.db) or one database's summary (--db DB), as
// Markdown, JUnit XML, JSON or a self-contained HTML page. Both databases are
// opened read-only and never written. docs/REPORT.md.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "report/report.hpp"
#include "store/kind.hpp"
#include "store/store.hpp"
#include "generator/problem.hpp"
#include "search/ceilings.hpp"

namespace ft::cli {
namespace {

struct ReportOptions {
  std::string baseline;
  std::string current;
  std::string db;
  std::string threshold = "5%";
  std::string format = "md";
  std::string out;
  std::string fail_on = "regression,broken,missing";
  bool allow_missing = false;  // a winner the current database lacks is not a failure
};

// The whole-layer roofline floor where this GPU's ceilings are measured; the
// stage kernels (moe1, moe2) have no floor of their own.
std::optional<double> layer_floor_us(const db::ProblemRecord& pr, const db::DeviceRecord& device, int tokens,
                                     std::string_view kind) {
  if (!db::is(kind, db::Kind::layer)) return std::nullopt;
  auto ceilings = measured_ceilings(device.name);
  if (!ceilings) return std::nullopt;
  auto p = pr.to_problem();
  if (!p) return std::nullopt;
  return roofline_floor_us(*p, tokens, *ceilings);
}

Result<db::Store> open_input(const std::string& path, std::string_view role) {
  auto store = db::Store::open(path, db::OpenMode::read_only);
  if (!store) return std::unexpected(with_context(store.error(), std::string(role)));
  return store;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  return std::filesystem::equivalent(a, b, ec) && !ec;
}

Status write_output(const ReportOptions& opt, const std::string& text) {
  if (opt.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    return {};
  }
  std::ofstream f(opt.out, std::ios::binary | std::ios::trunc);
  f.write(text.data(), std::streamsize(text.size()));
  f.close();
  if (!f) return fail(Errc::io, "cannot write the report", opt.out);
  return {};
}

int run_report(const ReportOptions& opt) {
  const bool compare_mode = !opt.baseline.empty() || !opt.current.empty();
  if (compare_mode && !opt.db.empty())
    return report_error({Errc::usage, "use either --db (one database) or --baseline and --current (a comparison)", {}});
  if (!compare_mode && opt.db.empty())
    return report_error({Errc::usage, "give --baseline A.db --current B.db, or --db DB for one database's summary", {}});
  if (compare_mode && (opt.baseline.empty() || opt.current.empty()))
    return report_error({Errc::usage, opt.baseline.empty() ? "--current needs --baseline" : "--baseline needs --current", {}});

  for (const std::string* input : {&opt.baseline, &opt.current, &opt.db})
    if (!opt.out.empty() && !input->empty() && same_file(opt.out, *input))
      return report_error({Errc::usage, "is one of the input databases; a report never overwrites a database", opt.out});

  auto format = db::report::parse_format(opt.format);
  if (!format) return report_error(format.error());
  auto threshold = db::report::parse_threshold(opt.threshold);
  if (!threshold) return report_error(with_context(threshold.error(), "--threshold"));
  auto fail_on = db::report::parse_verdict_list(opt.fail_on);
  if (!fail_on) return report_error(with_context(fail_on.error(), "--fail-on"));
  if (opt.allow_missing) std::erase(*fail_on, db::report::Verdict::missing);

  if (!compare_mode) {
    auto store = open_input(opt.db, "database");
    if (!store) return report_error(store.error());
    auto summary = db::report::summarize(*store, {layer_floor_us});
    if (!summary) return report_error(with_context(summary.error(), opt.db));
    if (auto w = write_output(opt, db::report::render(*summary, *format)); !w) return report_error(w.error());
    if (!opt.out.empty()) fmt::print("{}: {}; wrote {}\n", opt.db, db::report::summary_line(*summary), opt.out);
    return kExitOk;
  }

  auto baseline = open_input(opt.baseline, "baseline");
  if (!baseline) return report_error(baseline.error());
  auto current = open_input(opt.current, "current");
  if (!current) return report_error(current.error());
  auto comparison = db::report::compare(*baseline, *current, {*threshold, layer_floor_us});
  if (!comparison) return report_error(comparison.error());
  if (auto w = write_output(opt, db::report::render(*comparison, *format, *fail_on)); !w) return report_error(w.error());
  const bool failed = comparison->fails(*fail_on);
  if (!opt.out.empty())
    fmt::print("{}: {}; wrote {}\n", failed ? "FAILED" : "passed", db::report::summary_line(*comparison), opt.out);
  // 3, not 1: CI tells "the kernels got worse" from "the report could not run".
  return failed ? kExitRegression : kExitOk;
}

}  // namespace

Command setup_report(CLI::App& app) {
  auto opt = std::make_shared<ReportOptions>();
  CLI::App* sub = app.add_subcommand(
      "report", "CI regression report: compare a baseline and a current database, or summarize one database");
  sub->add_option("--baseline", opt->baseline, "The reference database (read-only)");
  sub->add_option("--current", opt->current, "The database to judge (read-only)");
  sub->add_option("--db", opt->db, "Summarize one database instead: winners, % of the roofline floor, failures");
  sub->add_option("--threshold", opt->threshold, "Smallest change that counts: 5% or 0.05")->capture_default_str();
  sub->add_option("--format", opt->format, "md, junit, json or html")->capture_default_str();
  sub->add_option("--out", opt->out, "Write the report to this file instead of standard output");
  sub->add_option("--fail-on", opt->fail_on,
                  "Verdicts that make the exit code 3: a list of broken, regression, missing, new, improvement, "
                  "unchanged, or none")
      ->capture_default_str();
  sub->add_flag("--allow-missing", opt->allow_missing,
                "Winners the baseline has and the current database lacks do not fail the report");
  sub->footer(
      "Examples:\n"
      "  flytune report --baseline main.db --current pr.db                 # exit 3 on a regression\n"
      "  flytune report --baseline main.db --current pr.db --format junit --out report.xml\n"
      "  flytune report --baseline main.db --current pr.db --allow-missing --fail-on regression\n"
      "  flytune report --db flytune.db --format html --out report.html");
  return {sub, [opt] { return run_report(*opt); }};
}

}  // namespace ft::cli
