// flytune db: what a database holds -- runs, winners, statistics, variants and
// the schema version --, a safe copy of it, and how well the cost model would
// have guided the search on its timings (model-check). Opens the file
// read-only: it never writes to it. `db merge` is the one writer: it merges databases into a
// new or existing file (store/merge.hpp).
#include <algorithm>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/db_model_check.hpp"
#include "cli/db_views.hpp"
#include "cli/table.hpp"
#include "cli/diag.hpp"
#include "cli/option_checks.hpp"
#include "store/merge.hpp"
#include "store/kind.hpp"
#include "store/store.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "search/model_check.hpp"

namespace ft::cli {
namespace {

Status show_model_check(db::Store& store, const DbOptions& opt) {
  model::CheckOptions co;
  co.pick = opt.pick;
  co.mode = opt.mode == "search" ? model::CheckMode::search : model::CheckMode::leave_one_out;
  co.seed = opt.seed;
  co.kind = opt.kind;
  co.problem_key = opt.problem;
  return print_model_check(store, co, opt.json);
}

Status write_snapshot(db::Store& store, const DbOptions& opt) {
  FT_CHECK(store.snapshot(opt.out));
  if (opt.json) fmt::print("{}\n", nlohmann::json{{"snapshot", opt.out}, {"from", store.path()}}.dump(2));
  else fmt::print("wrote {} (a self-contained copy of {})\n", opt.out, store.path());
  return {};
}

int run_merge(const DbOptions& opt) {
  auto summary = db::merge_databases(opt.out, opt.inputs);
  if (!summary) return report_error(summary.error());
  std::map<std::string, std::int64_t> before(summary->rows_before.begin(), summary->rows_before.end());
  if (opt.json) {
    nlohmann::json added = nlohmann::json::object();
    for (const auto& [name, rows] : summary->rows_after) added[name] = rows - before[name];
    fmt::print("{}\n", nlohmann::json{{"merged_into", opt.out},
                                      {"inputs", opt.inputs},
                                      {"rows_added", added},
                                      {"winners_changed", summary->winners_changed}}
                           .dump(2));
    return kExitOk;
  }
  fmt::print("merged {} database(s) into {}; {} winner(s) new or faster\n", opt.inputs.size(), opt.out,
             summary->winners_changed);
  Table t({"table", "rows", "added"}, ".rr");
  for (const auto& [name, rows] : summary->rows_after)
    t.add({name, std::to_string(rows), std::to_string(rows - before[name])});
  t.print("  ");
  return kExitOk;
}

int run_db(const DbOptions& opt) {
  if (opt.view == DbView::merge) return run_merge(opt);
  auto store = db::Store::open(opt.db, db::OpenMode::read_only);
  if (!store) return report_error(store.error());
  Status shown;
  switch (opt.view) {
    case DbView::runs: shown = show_runs(*store, opt); break;
    case DbView::winners: shown = show_winners(*store, opt); break;
    case DbView::stats: shown = show_stats(*store, opt); break;
    case DbView::variants: shown = show_variants(*store, opt); break;
    case DbView::schema: shown = show_schema(*store, opt); break;
    case DbView::snapshot: shown = write_snapshot(*store, opt); break;
    case DbView::model_check: shown = show_model_check(*store, opt); break;
    case DbView::merge: break;  // handled above: it opens no single database
  }
  if (!shown) return report_error(shown.error());
  return kExitOk;
}

// The view named on the command line, or a usage error naming the stray word
// and the views there are.
int run_view(const DbOptions& opt, const CLI::App& sub) {
  std::string views;
  bool chosen = false;
  for (const CLI::App* v : sub.get_subcommands([](const CLI::App*) { return true; })) {
    views += (views.empty() ? "" : ", ") + v->get_name();
    chosen = chosen || v->parsed();
  }
  if (auto extra = sub.remaining(); !extra.empty()) {
    const std::string word = shorten(extra.front());
    return report_error(Error{Errc::usage,
                              word.starts_with("-")
                                  ? fmt::format("unknown option '{}'; see 'flytune db VIEW --help'", word)
                                  : fmt::format("unknown view '{}'; 'flytune db' shows one of: {}", word, views),
                              "db"});
  }
  if (!chosen) return report_error(Error{Errc::usage, fmt::format("name what to show: {}", views), "db"});
  return run_db(opt);
}

}  // namespace

Command setup_db(CLI::App& app) {
  auto opt = std::make_shared<DbOptions>();
  CLI::App* sub = app.add_subcommand("db", "Show what a flytune database holds: runs, winners, statistics, variants, schema; "
                                              "merge databases");
  sub->add_option("--db", opt->db, "Database file")->capture_default_str();
  sub->add_flag("--json", opt->json, "Print JSON instead of tables");
  // The view is checked in run_view (not by CLI11, whose "A subcommand is
  // required" would not name a mistyped view).
  sub->require_subcommand(0, 1);
  sub->allow_extras();

  auto view = [&](const char* name, const char* help, DbView v) {
    CLI::App* s = sub->add_subcommand(name, help);
    s->fallthrough();  // --db/--json may follow the view name
    s->callback([opt, v] { opt->view = v; });
    return s;
  };
  view("runs", "Runs: when, what, with which flytune, how many measurements succeeded", DbView::runs);
  CLI::App* winners = view("winners", "Winners per problem, device and token bucket", DbView::winners);
  winners->add_option("--problem", opt->problem, "Only this problem key");
  winners->add_option("--target", opt->target, fmt::format("Only devices of this target ({})", known_target_names(" or ")));
  winners->add_option("--tokens", opt->tokens, "Only this token bucket")->check(whole_number_at_least(1));
  winners->add_option("--kind", opt->kind, "Only this kind (moe1, moe2, layer, ...)");
  winners->add_option("--pass", opt->pass, "Only this pass's winners (forward or backward; default both)")
      ->check(CLI::IsMember({"forward", "backward"}));
  view("stats", "Variants per compile status; measurements per run and status", DbView::stats);
  CLI::App* variants = view("variants", "Compiled variants with their resources", DbView::variants);
  variants->add_option("--target", opt->target, fmt::format("Only this target ({})", known_target_names(" or ")));
  variants->add_option("--kind", opt->kind, "Only this kind");
  variants->add_option("--status", opt->status, "Only this compile status")->check(CLI::IsMember({"ok", "compile_error"}));
  variants->add_option("--limit", opt->limit, "At most this many rows")->check(whole_number_at_least(0));
  CLI::App* schema = view("schema", "Schema version, applied migrations and table sizes", DbView::schema);
  schema->add_flag("--sql", opt->sql, "Print the schema's CREATE statements");
  CLI::App* snapshot = view("snapshot", "Write a self-contained single-file copy (safe while a search runs)",
                             DbView::snapshot);
  snapshot->add_option("out", opt->out, "The new file (must not exist)")->required();
  CLI::App* merge = view("merge",
                         "Merge databases into OUT (created if missing): runs, devices, toolchains, variants, "
                         "code objects and measurements with their provenance; winners re-derived",
                         DbView::merge);
  merge->add_option("OUT", opt->out, "The merged database (created if missing; may be one of the inputs)")->required();
  merge->add_option("IN", opt->inputs, "Databases to merge (opened read-only)")->required();
  CLI::App* check = view("model-check",
                         "How well the cost model would have guided the search: each fully timed bucket predicted "
                         "without its own timings",
                         DbView::model_check);
  check->add_option("--mode", opt->mode, "loo (leave one bucket out) or search (the model-guided search replayed)")
      ->check(CLI::IsMember({"loo", "search"}))
      ->capture_default_str();
  check->add_option("--budget", opt->pick.budget_s, "Seconds of short timing per kind and bucket the pick may spend")
      ->check(finite_seconds())
      ->capture_default_str();
  check->add_option("--min-top", opt->pick.min_top, "The pick holds at least this many of the model's fastest")
      ->check(whole_number_at_least(1))
      ->capture_default_str();
  check->add_option("--explore", opt->pick.explore, "Others the pick draws at random")
      ->check(whole_number_at_least(0))
      ->capture_default_str();
  check->add_option("--kind", opt->kind, "Only this kind (moe1, moe2, ...)");
  check->add_option("--problem", opt->problem, "Only this problem key");
  check->add_option("--seed", opt->seed, "Seed of the random exploration")
      ->check(whole_number_at_least(0))
      ->capture_default_str();
  sub->footer(
      "Examples:\n"
      "  flytune db runs\n"
      "  flytune db --db runs/h200.db winners --target sm_90a --tokens 64\n"
      "  flytune db variants --status compile_error --limit 20\n"
      "  flytune db snapshot flytune-copy.db\n"
      "  flytune db merge all.db shard-0.db shard-1.db\n"
      "  flytune db --db runs/h200.db model-check --mode search");
  return {sub, [opt, sub] { return run_view(*opt, *sub); }};
}

}  // namespace ft::cli
