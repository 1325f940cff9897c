// flytune db's read-only views: runs, winners, statistics, variants and the
// schema of a database opened read-only, as tables (cli/table.hpp) or JSON.
#include "cli/db_views.hpp"

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

}  // namespace

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
  filter.pass = db::parse_pass(opt.pass);  // nullopt (both) when not given; CLI11 allows only the two names
  auto rows = FT_TRY(store.winners(filter));
  if (opt.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows) {
      const auto& w = r.winner;
      out.push_back({{"problem", r.problem.key},
                     {"device", {{"id", r.device.id}, {"name", r.device.name}, {"arch", r.device.arch},
                                 {"runtime", r.device.runtime}, {"driver_version", r.device.driver_version}}},
                     {"pass", db::to_string(w.pass)},
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
               filter.problem_key || filter.arch || filter.kind || filter.tokens || filter.pass ? " matching the filter" : "");
    return {};
  }
  // One table per (problem, device).
  std::size_t i = 0;
  while (i < rows.size()) {
    const auto& first = rows[i];
    fmt::print("{}{} on {} ({}, {} {})\n", i == 0 ? "" : "\n", first.problem.key, first.device.name, first.device.arch,
               first.device.runtime, first.device.driver_version);
    Table t({"pass", "kind", "tokens", "median us", "p10-p90 us", "vs default", "kernel", "toolchain"}, "..rrrr");
    const std::size_t begin = i;
    for (; i < rows.size() && rows[i].problem.id == first.problem.id && rows[i].device.id == first.device.id; ++i) {
      const auto& r = rows[i];
      const auto& w = r.winner;
      t.add({std::string(db::to_string(w.pass)), w.kind, std::to_string(w.tokens), fmt::format("{:.1f}", w.median_us),
             w.p10_us && w.p90_us ? fmt::format("{:.1f}-{:.1f}", *w.p10_us, *w.p90_us) : "-",
             w.speedup_vs_default ? fmt::format("{:.2f}x", *w.speedup_vs_default) : "-", r.variant.kernel_name,
             r.toolchain.label()});
    }
    t.print("  ");
    if (!filter.kind && filter.pass != db::Pass::backward) {
      std::vector<db::WinnerRow> group;  // the forward's: its stage winners without a layer winner
      for (auto r = rows.begin() + long(begin); r != rows.begin() + long(i); ++r)
        if (r->winner.pass == db::Pass::forward) group.push_back(*r);
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

}  // namespace ft::cli
