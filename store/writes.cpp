// The Store's writes: runs, devices, toolchains, problems, variants, code
// objects, measurements, winners, transactions and the merge's imports.
#include <fmt/format.h>

#include "store/internal.hpp"
#include "store/rows.hpp"

namespace ft::db {
using namespace sql;

Result<std::int64_t> returning_id(Query& q) {
  bool row = FT_TRY(q.step());
  if (!row) return fail(Errc::database, "statement returned no id");
  return q.i64(0);
}

namespace {
// A run's options_json: its options with the pid and process name added.
std::string run_options_text(const RunRecord& run) {
  nlohmann::json options = run.options.is_object() ? run.options : nlohmann::json::object();
  if (run.pid) options["pid"] = run.pid;
  if (!run.process.empty()) options["process"] = run.process;
  return json_text(options);
}
}  // namespace

Result<std::int64_t> Store::begin_run(const RunRecord& run) {
  FT_CHECK(impl_->writable("begin_run"));
  auto q = FT_TRY(impl_->query(
      "INSERT INTO runs (" FT_RUN_FIELDS("") ") VALUES (?1, NULL, 'running', ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id"));
  q.bind(1, run.started_at.empty() ? utc_now() : run.started_at);
  q.bind(2, run.command_line);
  q.bind(3, run.flytune_version);
  q.bind(4, run.git_commit);
  q.bind(5, run.templates_commit);
  q.bind(6, run.hostname);
  q.bind(7, run.strategy);
  q.bind(8, run_options_text(run));
  auto row = q.step();
  if (!row || !*row) return std::unexpected(impl_->error(row ? Error{Errc::database, "no id returned"} : row.error(), "begin_run"));
  return q.i64(0);
}

Status Store::end_run(std::int64_t run_id, RunStatus status) {
  FT_CHECK(impl_->writable("end_run"));
  auto q = FT_TRY(impl_->query("UPDATE runs SET ended_at = ?2, status = ?3 WHERE id = ?1"));
  q.bind(1, run_id);
  q.bind(2, utc_now());
  q.bind(3, to_string(status));
  if (auto s = q.run(); !s) return std::unexpected(impl_->error(s.error(), "end_run"));
  if (sqlite3_changes(impl_->db.get()) == 0)
    return fail(Errc::not_found, fmt::format("end_run: no run with id {}", run_id), impl_->path);
  return {};
}


Result<std::int64_t> Store::upsert_device(const DeviceRecord& d) {
  FT_CHECK(impl_->writable("upsert_device"));
  // The no-op update makes RETURNING yield the existing row's id.
  auto q = FT_TRY(impl_->query(
      "INSERT INTO devices (" FT_DEVICE_FIELDS("") ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
      "ON CONFLICT (" FT_DEVICE_FIELDS("") ") DO UPDATE SET name = excluded.name RETURNING id"));
  q.bind(1, d.runtime);
  q.bind(2, d.name);
  q.bind(3, d.arch);
  q.bind(4, d.compute_units);
  q.bind(5, d.memory_bytes);
  q.bind(6, d.l2_bytes);
  q.bind(7, d.max_shared_per_block);
  q.bind(8, d.clock_mhz);
  q.bind(9, d.driver_version);
  q.bind(10, d.runtime_version);
  auto id = returning_id(q);
  if (!id) return std::unexpected(impl_->error(id.error(), fmt::format("upsert_device {}", d.name)));
  return id;
}

Result<std::int64_t> Store::upsert_toolchain(const ToolchainRecord& t) {
  FT_CHECK(impl_->writable("upsert_toolchain"));
  auto q = FT_TRY(impl_->query(
      "INSERT INTO toolchains (" FT_TOOLCHAIN_FIELDS("") ") VALUES (?1, ?2, ?3) "
      "ON CONFLICT (" FT_TOOLCHAIN_FIELDS("") ") DO UPDATE SET version = excluded.version RETURNING id"));
  q.bind(1, t.backend);
  q.bind(2, t.version);
  q.bind(3, t.path);
  auto id = returning_id(q);
  if (!id) return std::unexpected(impl_->error(id.error(), fmt::format("upsert_toolchain {}", t.backend)));
  return id;
}

Result<std::int64_t> Store::upsert_problem(const ProblemRecord& p) {
  FT_CHECK(impl_->writable("upsert_problem"));
  // The key names the shape, so an existing key keeps its row unchanged.
  auto q = FT_TRY(impl_->query(
      "INSERT INTO problems (" FT_PROBLEM_FIELDS("") ") "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) ON CONFLICT (key) DO UPDATE SET key = excluded.key RETURNING id"));
  q.bind(1, p.key);
  q.bind(2, p.experts);
  q.bind(3, p.hidden);
  q.bind(4, p.inter);
  q.bind(5, p.topk);
  q.bind(6, p.dtype);
  q.bind(7, p.activation);
  q.bind(8, p.routing);
  auto id = returning_id(q);
  if (!id) return std::unexpected(impl_->error(id.error(), fmt::format("upsert_problem {}", p.key)));
  return id;
}


Result<std::int64_t> Store::upsert_variant(const VariantRecord& v) {
  FT_CHECK(impl_->writable("upsert_variant"));
  auto q = FT_TRY(impl_->query(
      "INSERT INTO variants (" FT_VARIANT_FIELDS("") ") "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?20) "
      "ON CONFLICT (kernel_name, target, toolchain_id) DO UPDATE SET kind = excluded.kind, "
      "params_json = excluded.params_json, source_hash = excluded.source_hash, "
      "code_object_hash = excluded.code_object_hash, compile_status = excluded.compile_status, "
      "compile_log = excluded.compile_log, compile_seconds = excluded.compile_seconds, vgprs = excluded.vgprs, "
      "agprs = excluded.agprs, sgprs = excluded.sgprs, regs = excluded.regs, lds_bytes = excluded.lds_bytes, "
      "scratch_bytes = excluded.scratch_bytes, spills = excluded.spills, occupancy = excluded.occupancy, "
      "matrix_ops_json = excluded.matrix_ops_json, updated_at = excluded.updated_at RETURNING id"));
  bind_variant(q, v);
  q.bind(20, utc_now());
  auto id = returning_id(q);
  if (!id) return std::unexpected(impl_->error(id.error(), fmt::format("upsert_variant {}", v.kernel_name)));
  return id;
}

Status Store::put_code_object(std::string_view hash, std::string_view format, std::span<const std::byte> bytes) {
  FT_CHECK(impl_->writable("put_code_object"));
  auto q = FT_TRY(impl_->query(
      "INSERT INTO code_objects (hash, format, size, bytes) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (hash) DO NOTHING"));
  q.bind(1, hash);
  q.bind(2, format);
  q.bind(3, static_cast<std::int64_t>(bytes.size()));
  q.bind_blob(4, bytes);
  if (auto s = q.run(); !s) return std::unexpected(impl_->error(s.error(), fmt::format("put_code_object {}", hash)));
  return {};
}

Result<std::int64_t> Store::add_measurement(const MeasurementRecord& m) {
  FT_CHECK(impl_->writable("add_measurement"));
  auto q = FT_TRY(impl_->query(
      "INSERT INTO measurements (" FT_MEASUREMENT_FIELDS("") ") "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20) RETURNING id"));
  bind_measurement(q, m, m.measured_at.empty() ? utc_now() : m.measured_at);
  auto id = returning_id(q);
  if (!id) return std::unexpected(impl_->error(id.error(), "add_measurement"));
  return id;
}

Status Store::set_winner(const WinnerRecord& w) {
  FT_CHECK(impl_->writable("set_winner"));
  auto q = FT_TRY(impl_->query(
      "INSERT INTO winners (" FT_WINNER_COLUMNS("") ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13) "
      "ON CONFLICT (problem_id, device_id, tokens, kind, pass) DO UPDATE SET variant_id = excluded.variant_id, "
      "run_id = excluded.run_id, median_us = excluded.median_us, p10_us = excluded.p10_us, p90_us = excluded.p90_us, "
      "default_variant_id = excluded.default_variant_id, speedup_vs_default = excluded.speedup_vs_default, "
      "chosen_at = excluded.chosen_at"));
  q.bind(1, w.problem_id);
  q.bind(2, w.device_id);
  q.bind(3, w.tokens);
  q.bind(4, w.kind);
  q.bind(5, w.variant_id);
  q.bind(6, w.run_id);
  q.bind(7, w.median_us);
  q.bind(8, w.p10_us);
  q.bind(9, w.p90_us);
  q.bind(10, w.default_variant_id);
  q.bind(11, w.speedup_vs_default);
  q.bind(12, w.chosen_at.empty() ? utc_now() : w.chosen_at);
  q.bind(13, to_string(w.pass));
  if (auto s = q.run(); !s) return std::unexpected(impl_->error(s.error(), "set_winner"));
  return {};
}

Status Store::transaction(const std::function<Status()>& body) {
  FT_CHECK(impl_->writable("transaction"));
  sqlite3* db = impl_->db.get();
  FT_CHECK(exec(db, impl_->path, "BEGIN IMMEDIATE"));
  Status s = body();
  if (s) s = exec(db, impl_->path, "COMMIT");
  if (!s && !sqlite3_get_autocommit(db)) (void)exec(db, impl_->path, "ROLLBACK");
  return s;
}

Result<std::int64_t> Store::import_run(const RunRecord& run) {
  FT_CHECK(impl_->writable("import_run"));
  const std::string options = run_options_text(run);
  {
    auto q = FT_TRY(impl_->query(
        "SELECT id FROM runs WHERE started_at = ?1 AND hostname = ?2 AND command_line = ?3 AND options_json = ?4 "
        "ORDER BY id LIMIT 1"));
    q.bind(1, run.started_at);
    q.bind(2, run.hostname);
    q.bind(3, run.command_line);
    q.bind(4, options);
    if (FT_TRY(q.step())) return q.i64(0);
  }
  auto q = FT_TRY(impl_->query(
      "INSERT INTO runs (" FT_RUN_FIELDS("") ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id"));
  q.bind(1, run.started_at);
  q.bind_or_null(2, run.ended_at);
  q.bind(3, to_string(run.status));
  q.bind(4, run.command_line);
  q.bind(5, run.flytune_version);
  q.bind(6, run.git_commit);
  q.bind(7, run.templates_commit);
  q.bind(8, run.hostname);
  q.bind(9, run.strategy);
  q.bind(10, options);
  auto id = returning_id(q);
  if (!id) return std::unexpected(impl_->error(id.error(), fmt::format("import_run {}", run.started_at)));
  return id;
}

Result<std::int64_t> Store::import_variant(const VariantRecord& v) {
  FT_CHECK(impl_->writable("import_variant"));
  {
    auto q = FT_TRY(impl_->query("SELECT id FROM variants WHERE kernel_name = ?1 AND target = ?2 AND toolchain_id = ?3"));
    q.bind(1, v.kernel_name);
    q.bind(2, v.target);
    q.bind(3, v.toolchain_id);
    if (FT_TRY(q.step())) return q.i64(0);
  }
  auto q = FT_TRY(impl_->query(
      "INSERT INTO variants (" FT_VARIANT_FIELDS("") ") "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21) "
      "RETURNING id"));
  bind_variant(q, v);
  q.bind(20, v.created_at.empty() ? utc_now() : v.created_at);
  q.bind(21, v.updated_at.empty() ? utc_now() : v.updated_at);
  auto id = returning_id(q);
  if (!id) return std::unexpected(impl_->error(id.error(), fmt::format("import_variant {}", v.kernel_name)));
  return id;
}

Result<std::int64_t> Store::import_measurement(const MeasurementRecord& m) {
  FT_CHECK(impl_->writable("import_measurement"));
  auto q = FT_TRY(impl_->query(
      "SELECT id FROM measurements WHERE run_id = ?1 AND variant_id = ?2 AND problem_id = ?3 AND device_id = ?4 "
      "AND tokens = ?5 AND phase = ?6 AND status = ?7 AND error_message = ?8 AND median_us IS ?9 AND p10_us IS ?10 "
      "AND p90_us IS ?11 AND min_us IS ?12 AND samples = ?13 AND rel_l2_err IS ?14 AND max_abs_err IS ?15 "
      "AND sm_clock_mhz IS ?16 AND mem_clock_mhz IS ?17 AND temperature_c IS ?18 AND pci_bus_id = ?19 "
      "AND measured_at = ?20 ORDER BY id LIMIT 1"));
  bind_measurement(q, m, m.measured_at);
  if (FT_TRY(q.step())) return q.i64(0);
  return add_measurement(m);
}


}  // namespace ft::db
