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

enum class DbView { runs, winners, stats, variants, schema, snapshot, merge, model_check };

struct DbOptions {
  std::string db = "./flytune.db";
  bool json = false;
  DbView view = DbView::runs;
  // Filters (winners, variants).
  std::string problem;
  std::string target;
  int tokens = 0;  // 0: every bucket
  std::string kind;
  std::string status;
  int limit = 0;
  bool sql = false;  // schema: print the CREATE statements
  std::string out;   // snapshot: the new file; merge: the merged database
  std::vector<std::string> inputs;  // merge: the databases to merge into `out`
  // model-check: the replay and the pick's options (the search's defaults).
  std::string mode = "loo";
  model::PickOptions pick;
  std::uint64_t seed = 1;
};


std::string opt_text(const std::optional<double>& v, std::string_view spec = "{:.1f}") {
  return v ? fmt::format(fmt::runtime(spec), *v) : "-";
}
std::string opt_text(const std::optional<int>& v) { return v ? std::to_string(*v) : "-"; }

template <class T>
nlohmann::json opt_json(const std::optional<T>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

nlohmann::json to_json(const db::RunRecord& r) {
  return {{"id", r.id},
          {"status", to_string(r.status)},
          {"started_at", r.started_at},
          {"ended_at", r.ended_at.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.ended_at)},
          {"command_line", r.command_line},
          {"flytune_version", r.flytune_version},
          {"git_commit", r.git_commit},
          {"templates_commit", r.templates_commit},
          {"hostname", r.hostname},
          {"strategy", r.strategy},
          {"dry_run", r.options.is_object() && r.options.value("dry_run", false)},
          {"options", r.options}};
}

nlohmann::json to_json(const db::Resources& r) {
  return {{"vgprs", opt_json(r.vgprs)},         {"agprs", opt_json(r.agprs)},
          {"sgprs", opt_json(r.sgprs)},         {"regs", opt_json(r.regs)},
          {"lds_bytes", opt_json(r.lds_bytes)}, {"scratch_bytes", opt_json(r.scratch_bytes)},
          {"spills", opt_json(r.spills)},       {"occupancy", opt_json(r.occupancy)}};
}

nlohmann::json to_json(const db::VariantRecord& v) {
  return {{"id", v.id},
          {"kernel_name", v.kernel_name},
          {"target", v.target},
          {"kind", v.kind},
          {"params", v.params},
          {"source_hash", v.source_hash},
          {"code_object_hash", v.code_object_hash.empty() ? nlohmann::json(nullptr) : nlohmann::json(v.code_object_hash)},
          {"toolchain_id", v.toolchain_id},
          {"compile_status", to_string(v.compile_status)},
          {"compile_seconds", opt_json(v.compile_seconds)},
          {"resources", to_json(v.resources)},
          {"matrix_ops", v.matrix_ops},
          {"created_at", v.created_at},
          {"updated_at", v.updated_at}};
}

// "64 ok / 70" style summaries need counts per run.
std::map<std::int64_t, std::map<std::string, std::int64_t>> counts_by_run(const std::vector<db::MeasurementCount>& counts) {
  std::map<std::int64_t, std::map<std::string, std::int64_t>> out;
  for (const auto& c : counts) out[c.run_id][c.status] += c.count;
  return out;
}

Status show_runs(db::Store& store, const DbOptions& opt) {
  auto runs = FT_TRY(store.list_runs());
  auto counts = counts_by_run(FT_TRY(store.measurement_counts()));
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : runs) {
      auto j = to_json(r);
      j["measurements"] = counts[r.id];
      out.push_back(std::move(j));
    }
    fmt::print("{}\n", out.dump(2));
    return {};
  }
  if (runs.empty()) {
    fmt::print("no runs recorded in {}\n", store.path());
    return {};
  }
  Table t({"run", "status", "started (UTC)", "ended (UTC)", "strategy", "ok", "failed", "flytune", "host", "command"},
          "r....rr");
  for (const auto& r : runs) {
    std::int64_t ok = 0, failed = 0;
    for (const auto& [status, n] : counts[r.id]) {
      if (status == "ok") ok += n;
      else if (status != "skipped") failed += n;
    }
    // A dry run times nothing: its strategy was never used.
    const bool dry_run = r.options.is_object() && r.options.value("dry_run", false);
    t.add({std::to_string(r.id), std::string(to_string(r.status)), r.started_at, r.ended_at.empty() ? "-" : r.ended_at,
           dry_run ? "dry run" : r.strategy, std::to_string(ok), std::to_string(failed), fmt::format("{} ({})", r.flytune_version, r.git_commit),
           r.hostname, r.command_line});
  }
  t.print();
  return {};
}

// Buckets of one (problem, device) with stage winners but no layer winner, and
// why: the message of the last layer measurement that failed there (a layer
// that failed verification, or whose timing failed), else that none was made.
Result<std::vector<std::string>> missing_layers(db::Store& store, const std::vector<db::WinnerRow>& rows) {
  std::map<int, bool> layer;  // tokens -> has a layer winner
  for (const auto& r : rows) layer[r.winner.tokens] = layer[r.winner.tokens] || db::is(r.winner.kind, db::Kind::layer);
  std::set<std::int64_t> layer_variants;
  std::vector<std::string> out;
  for (const auto& [tokens, has] : layer) {
    if (has) continue;
    if (layer_variants.empty()) {
      db::VariantFilter vf;
      vf.kind = db::kind_text(db::Kind::layer);
      for (const auto& v : FT_TRY(store.variants(vf))) layer_variants.insert(v.id);
    }
    db::MeasurementFilter mf;
    mf.problem_id = rows.front().problem.id;
    mf.device_id = rows.front().device.id;
    mf.tokens = tokens;
    std::string why = "no layer was measured (the search stopped before pairing its stages, or no pair could run; its "
                      "output says which)";
    std::int64_t latest = 0;
    for (const auto& m : FT_TRY(store.measurements(mf)))
      if (layer_variants.contains(m.variant_id) && m.status != db::MeasurementStatus::ok && m.id > latest) {
        latest = m.id;
        why = fmt::format("{} ({}): {}", db::to_string(m.status), m.phase, m.error_message);
      }
    out.push_back(fmt::format("T={}: no layer winner: {}", tokens, why));
  }
  return out;
}

Status show_winners(db::Store& store, const DbOptions& opt) {
  db::WinnerFilter filter;
  if (!opt.problem.empty()) filter.problem_key = opt.problem;
  if (!opt.target.empty()) filter.arch = opt.target;
  if (!opt.kind.empty()) filter.kind = opt.kind;
  if (opt.tokens > 0) filter.tokens = opt.tokens;
  auto rows = FT_TRY(store.winners(filter));
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows) {
      const auto& w = r.winner;
      out.push_back({{"problem", r.problem.key},
                     {"device", {{"id", r.device.id}, {"name", r.device.name}, {"arch", r.device.arch},
                                 {"runtime", r.device.runtime}, {"driver_version", r.device.driver_version}}},
                     {"tokens", w.tokens},
                     {"kind", w.kind},
                     {"kernel_name", r.variant.kernel_name},
                     {"variant_id", w.variant_id},
                     {"median_us", w.median_us},
                     {"p10_us", opt_json(w.p10_us)},
                     {"p90_us", opt_json(w.p90_us)},
                     {"speedup_vs_default", opt_json(w.speedup_vs_default)},
                     {"toolchain", r.toolchain.label()},
                     {"code_object_hash", r.variant.code_object_hash},
                     {"run_id", w.run_id},
                     {"chosen_at", w.chosen_at}});
    }
    fmt::print("{}\n", out.dump(2));
    return {};
  }
  if (rows.empty()) {
    fmt::print("no winners recorded in {}{}\n", store.path(),
               filter.problem_key || filter.arch || filter.kind || filter.tokens ? " matching the filter" : "");
    return {};
  }
  // One table per (problem, device).
  std::size_t i = 0;
  while (i < rows.size()) {
    const auto& first = rows[i];
    fmt::print("{}{} on {} ({}, {} {})\n", i == 0 ? "" : "\n", first.problem.key, first.device.name, first.device.arch,
               first.device.runtime, first.device.driver_version);
    Table t({"kind", "tokens", "median us", "p10-p90 us", "vs default", "kernel", "toolchain"}, ".rrrr");
    const std::size_t begin = i;
    for (; i < rows.size() && rows[i].problem.id == first.problem.id && rows[i].device.id == first.device.id; ++i) {
      const auto& r = rows[i];
      const auto& w = r.winner;
      t.add({w.kind, std::to_string(w.tokens), fmt::format("{:.1f}", w.median_us),
             w.p10_us && w.p90_us ? fmt::format("{:.1f}-{:.1f}", *w.p10_us, *w.p90_us) : "-",
             w.speedup_vs_default ? fmt::format("{:.2f}x", *w.speedup_vs_default) : "-", r.variant.kernel_name,
             r.toolchain.label()});
    }
    t.print("  ");
    if (!filter.kind) {
      const std::vector<db::WinnerRow> group(rows.begin() + long(begin), rows.begin() + long(i));
      for (const std::string& m : FT_TRY(missing_layers(store, group))) fmt::print("  {}\n", m);
    }
  }
  return {};
}

Status show_stats(db::Store& store, const DbOptions& opt) {
  auto variant_counts = FT_TRY(store.variant_counts());
  auto measurement_counts = FT_TRY(store.measurement_counts());
  auto runs = FT_TRY(store.list_runs());
  auto by_run = counts_by_run(measurement_counts);
  std::map<std::string, std::int64_t> totals;
  for (const auto& c : measurement_counts) totals[c.status] += c.count;

  if (opt.json) {
    nlohmann::json variants = nlohmann::json::array();
    for (const auto& c : variant_counts)
      variants.push_back({{"target", c.target}, {"kind", c.kind}, {"compile_status", c.status}, {"count", c.count}});
    nlohmann::json per_run = nlohmann::json::array();
    for (const auto& r : runs) per_run.push_back({{"run_id", r.id}, {"status", to_string(r.status)}, {"measurements", by_run[r.id]}});
    fmt::print("{}\n", nlohmann::json{{"variants", variants}, {"measurements", totals}, {"runs", per_run}}.dump(2));
    return {};
  }

  fmt::print("variants by target, kind and compile status:\n");
  if (variant_counts.empty()) fmt::print("  none\n");
  else {
    Table t({"target", "kind", "status", "count"}, "...r");
    for (const auto& c : variant_counts) t.add({c.target, c.kind, c.status, std::to_string(c.count)});
    t.print("  ");
  }

  // Columns: every measurement status in its canonical order.
  const std::vector<std::string> statuses{"ok", "verify_failed", "launch_error", "timeout", "compile_error", "skipped"};
  fmt::print("\nmeasurements by run and status:\n");
  if (runs.empty()) {
    fmt::print("  none\n");
    return {};
  }
  std::vector<std::string> header{"run", "status"};
  header.insert(header.end(), statuses.begin(), statuses.end());
  header.push_back("total");
  Table t(header, "r.rrrrrrr");
  auto add_row = [&](std::string run, std::string run_status, const std::map<std::string, std::int64_t>& counts) {
    std::vector<std::string> row{std::move(run), std::move(run_status)};
    std::int64_t total = 0;
    for (const auto& s : statuses) {
      auto it = counts.find(s);
      std::int64_t n = it == counts.end() ? 0 : it->second;
      total += n;
      row.push_back(std::to_string(n));
    }
    row.push_back(std::to_string(total));
    t.add(std::move(row));
  };
  for (const auto& r : runs) add_row(std::to_string(r.id), std::string(to_string(r.status)), by_run[r.id]);
  add_row("all", "", totals);
  t.print("  ");
  return {};
}

Status show_variants(db::Store& store, const DbOptions& opt) {
  db::VariantFilter filter;
  if (!opt.target.empty()) filter.target = opt.target;
  if (!opt.kind.empty()) filter.kind = opt.kind;
  if (!opt.status.empty()) filter.status = FT_TRY(db::parse_compile_status(opt.status));
  filter.limit = opt.limit;
  auto variants = FT_TRY(store.variants(filter));
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& v : variants) out.push_back(to_json(v));
    fmt::print("{}\n", out.dump(2));
    return {};
  }
  if (variants.empty()) {
    fmt::print("no variants recorded in {}{}\n", store.path(),
               filter.target || filter.kind || filter.status ? " matching the filter" : "");
    return {};
  }
  Table t({"id", "status", "target", "kind", "regs", "lds", "scratch", "spills", "occ", "compile s", "kernel"},
          "r...rrrrrr");
  for (const auto& v : variants) {
    const auto& r = v.resources;
    // AMD: VGPR(+AGPR)/SGPR; NVIDIA: registers per thread.
    std::string regs = r.vgprs ? fmt::format("{}v{}/{}s", *r.vgprs, r.agprs ? fmt::format("+{}a", *r.agprs) : "",
                                             opt_text(r.sgprs))
                               : opt_text(r.regs);
    t.add({std::to_string(v.id), std::string(to_string(v.compile_status)), v.target, v.kind, regs,
           opt_text(r.lds_bytes), opt_text(r.scratch_bytes), opt_text(r.spills), opt_text(r.occupancy),
           opt_text(v.compile_seconds, "{:.2f}"), v.kernel_name});
  }
  t.print();
  return {};
}

Status show_schema(db::Store& store, const DbOptions& opt) {
  if (opt.sql) {
    fmt::print("{}", FT_TRY(store.schema_sql()));
    return {};
  }
  auto info = FT_TRY(store.schema_info());
  if (opt.json) {
    nlohmann::json migrations = nlohmann::json::array();
    for (const auto& m : info.migrations)
      migrations.push_back({{"version", m.version}, {"name", m.name}, {"applied_at", m.applied_at}});
    nlohmann::json tables = nlohmann::json::object();
    for (const auto& [name, rows] : info.table_rows) tables[name] = rows;
    fmt::print("{}\n", nlohmann::json{{"path", store.path()},
                                      {"schema_version", info.version},
                                      {"supported_version", info.supported},
                                      {"application_id", info.application_id},
                                      {"journal_mode", info.journal_mode},
                                      {"migrations", migrations},
                                      {"tables", tables}}
                           .dump(2));
    return {};
  }
  fmt::print("{}: schema version {} (this flytune supports {}), application_id {:#010x}, journal mode {}\n",
             store.path(), info.version, info.supported, info.application_id, info.journal_mode);
  fmt::print("\nmigrations applied:\n");
  Table m({"version", "name", "applied (UTC)"}, "r");
  for (const auto& a : info.migrations) m.add({std::to_string(a.version), a.name, a.applied_at});
  m.print("  ");
  fmt::print("\ntables:\n");
  Table t({"table", "rows"}, ".r");
  for (const auto& [name, rows] : info.table_rows) t.add({name, std::to_string(rows)});
  t.print("  ");
  return {};
}

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
