// The Store's reads: the queries behind flytune db, report, export, the
// cost model and the search's resume, and the database's own facts.
#include <filesystem>

#include <fmt/format.h>

#include "store/internal.hpp"
#include "store/rows.hpp"

namespace ft::db {
using namespace sql;

Result<std::optional<MeasurementRecord>> Store::latest_measurement(const MeasurementKey& key) {
  static const std::string sql = std::string("SELECT ") + FT_MEASUREMENT_COLUMNS("") +
                                 " FROM measurements WHERE variant_id = ?1 AND problem_id = ?2 AND device_id = ?3 "
                                 "AND tokens = ?4 ORDER BY id DESC LIMIT 1";
  auto q = FT_TRY(impl_->query(sql));
  q.bind(1, key.variant_id);
  q.bind(2, key.problem_id);
  q.bind(3, key.device_id);
  q.bind(4, key.tokens);
  auto row = q.step();
  if (!row) return std::unexpected(impl_->error(row.error(), "latest_measurement"));
  if (!*row) return std::optional<MeasurementRecord>();
  return std::optional<MeasurementRecord>(read_measurement(q, 0));
}

Result<std::vector<RunRecord>> Store::list_runs() {
  static const std::string sql = std::string("SELECT " FT_RUN_COLUMNS("") " FROM runs ORDER BY id");
  auto q = FT_TRY(impl_->query(sql));
  return collect<RunRecord>(q, [](const Query& r) { return read_run(r, 0); });
}

Result<std::vector<DeviceRecord>> Store::devices() {
  auto q = FT_TRY(impl_->query("SELECT " FT_DEVICE_COLUMNS("") " FROM devices ORDER BY id"));
  return collect<DeviceRecord>(q, [](const Query& r) { return read_device(r, 0); });
}

Result<std::vector<ToolchainRecord>> Store::toolchains() {
  auto q = FT_TRY(impl_->query("SELECT " FT_TOOLCHAIN_COLUMNS("") " FROM toolchains ORDER BY id"));
  return collect<ToolchainRecord>(q, [](const Query& r) { return read_toolchain(r, 0); });
}

Result<std::vector<ProblemRecord>> Store::problems() {
  auto q = FT_TRY(impl_->query("SELECT " FT_PROBLEM_COLUMNS("") " FROM problems ORDER BY key"));
  return collect<ProblemRecord>(q, [](const Query& r) { return read_problem(r, 0); });
}

Result<std::optional<VariantRecord>> Store::variant(std::int64_t id) {
  auto q = FT_TRY(impl_->query("SELECT " FT_VARIANT_COLUMNS("") " FROM variants WHERE id = ?1"));
  q.bind(1, id);
  bool row = FT_TRY(q.step());
  if (!row) return std::optional<VariantRecord>();
  return std::optional<VariantRecord>(read_variant(q, 0));
}

Result<std::vector<VariantRecord>> Store::variants(const VariantFilter& f) {
  // NULL parameters match everything; a limit of -1 means none in SQLite.
  auto q = FT_TRY(impl_->query(
      "SELECT " FT_VARIANT_COLUMNS("") " FROM variants WHERE (?1 IS NULL OR kernel_name = ?1) AND "
      "(?2 IS NULL OR target = ?2) AND (?3 IS NULL OR kind = ?3) AND (?4 IS NULL OR compile_status = ?4) AND "
      "(?5 IS NULL OR toolchain_id = ?5) ORDER BY target, kind, kernel_name, id LIMIT ?6"));
  q.bind(1, f.kernel_name);
  q.bind(2, f.target);
  q.bind(3, f.kind);
  if (f.status) q.bind(4, to_string(*f.status));
  q.bind(5, f.toolchain_id);
  q.bind(6, f.limit > 0 ? f.limit : -1);
  return collect<VariantRecord>(q, [](const Query& r) { return read_variant(r, 0); });
}

Result<std::vector<MeasurementRecord>> Store::measurements(const MeasurementFilter& f) {
  auto q = FT_TRY(impl_->query(
      "SELECT " FT_MEASUREMENT_COLUMNS("m.") " FROM measurements AS m WHERE (?1 IS NULL OR m.run_id = ?1) AND "
      "(?2 IS NULL OR m.variant_id = ?2) AND (?3 IS NULL OR m.problem_id = ?3) AND (?4 IS NULL OR m.device_id = ?4) "
      "AND (?5 IS NULL OR m.tokens = ?5) AND (?6 IS NULL OR m.status = ?6) AND "
      "(?7 = 0 OR m.id = (SELECT max(n.id) FROM measurements AS n WHERE n.variant_id = m.variant_id AND "
      "n.problem_id = m.problem_id AND n.device_id = m.device_id AND n.tokens = m.tokens)) "
      "ORDER BY m.id LIMIT ?8"));
  q.bind(1, f.run_id);
  q.bind(2, f.variant_id);
  q.bind(3, f.problem_id);
  q.bind(4, f.device_id);
  q.bind(5, f.tokens);
  if (f.status) q.bind(6, to_string(*f.status));
  q.bind(7, f.latest_only ? 1 : 0);
  q.bind(8, f.limit > 0 ? f.limit : -1);
  return collect<MeasurementRecord>(q, [](const Query& r) { return read_measurement(r, 0); });
}

Result<std::vector<WinnerRow>> Store::winners(const WinnerFilter& f) {
  auto q = FT_TRY(impl_->query(
      "SELECT " FT_WINNER_COLUMNS("w.") ", " FT_PROBLEM_COLUMNS("p.") ", " FT_DEVICE_COLUMNS("d.") ", "
      FT_VARIANT_COLUMNS("v.") ", " FT_TOOLCHAIN_COLUMNS("t.") " FROM winners AS w "
      "JOIN problems AS p ON p.id = w.problem_id JOIN devices AS d ON d.id = w.device_id "
      "JOIN variants AS v ON v.id = w.variant_id JOIN toolchains AS t ON t.id = v.toolchain_id "
      "WHERE (?1 IS NULL OR p.key = ?1) AND (?2 IS NULL OR w.device_id = ?2) AND (?3 IS NULL OR d.arch = ?3) AND "
      "(?4 IS NULL OR w.tokens = ?4) AND (?5 IS NULL OR w.kind = ?5) AND (?6 IS NULL OR w.pass = ?6) "
      "ORDER BY p.key, d.arch, d.name, w.device_id, w.pass = 'backward', w.kind, w.tokens"));
  q.bind(1, f.problem_key);
  q.bind(2, f.device_id);
  q.bind(3, f.arch);
  q.bind(4, f.tokens);
  q.bind(5, f.kind);
  if (f.pass) q.bind(6, to_string(*f.pass));
  else q.bind(6, std::nullopt);
  return collect<WinnerRow>(q, [](const Query& r) {
    WinnerRow row;
    int c = 0;
    row.winner = read_winner(r, c);
    c += kWinnerColumnCount;
    row.problem = read_problem(r, c);
    c += kProblemColumnCount;
    row.device = read_device(r, c);
    c += kDeviceColumnCount;
    row.variant = read_variant(r, c);
    c += kVariantColumnCount;
    row.toolchain = read_toolchain(r, c);
    return row;
  });
}

Result<std::optional<std::vector<std::byte>>> Store::code_object(std::string_view hash) {
  auto q = FT_TRY(impl_->query("SELECT bytes FROM code_objects WHERE hash = ?1"));
  q.bind(1, hash);
  bool row = FT_TRY(q.step());
  if (!row) return std::optional<std::vector<std::byte>>();
  return std::optional<std::vector<std::byte>>(q.blob(0));
}

Result<std::optional<std::string>> Store::code_object_format(std::string_view hash) {
  auto q = FT_TRY(impl_->query("SELECT format FROM code_objects WHERE hash = ?1"));
  q.bind(1, hash);
  bool row = FT_TRY(q.step());
  if (!row) return std::optional<std::string>();
  return std::optional<std::string>(q.text(0));
}

Result<std::vector<MeasurementCount>> Store::measurement_counts() {
  auto q = FT_TRY(impl_->query(
      "SELECT run_id, status, count(*) FROM measurements GROUP BY run_id, status ORDER BY run_id, status"));
  return collect<MeasurementCount>(q, [](const Query& r) { return MeasurementCount{r.i64(0), r.text(1), r.i64(2)}; });
}

Result<std::vector<VariantCount>> Store::variant_counts() {
  auto q = FT_TRY(impl_->query(
      "SELECT target, kind, compile_status, count(*) FROM variants GROUP BY target, kind, compile_status "
      "ORDER BY target, kind, compile_status"));
  return collect<VariantCount>(q, [](const Query& r) { return VariantCount{r.text(0), r.text(1), r.text(2), r.i64(3)}; });
}

Status Store::snapshot(const std::string& out_path) {
  std::error_code ec;
  if (std::filesystem::exists(out_path, ec))
    return fail(Errc::invalid_input, "already exists; pass a new path for the snapshot", out_path);
  {
    // VACUUM INTO reads a consistent snapshot and writes only the new file,
    // so it works on a read-only connection; query_only would refuse it, so
    // it is lifted for this one statement (the connection itself cannot write).
    if (impl_->read_only) FT_CHECK(exec(impl_->db.get(), impl_->path, "PRAGMA query_only = OFF"));
    struct QueryOnlyAgain {
      Impl* impl;
      ~QueryOnlyAgain() {
        if (impl->read_only) (void)exec(impl->db.get(), impl->path, "PRAGMA query_only = ON");
      }
    } restore{impl_.get()};
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(impl_->db.get(), "VACUUM INTO ?1", -1, &raw, nullptr) != SQLITE_OK)
      return std::unexpected(sqlite_error(impl_->db.get(), impl_->path, "snapshot"));
    Stmt stmt(raw);
    Query q(impl_->db.get(), raw);
    q.bind(1, out_path);
    if (auto s = q.run(); !s) return std::unexpected(impl_->error(s.error(), fmt::format("snapshot to {}", out_path)));
  }
  // The copy keeps the WAL flag; a single-file journal mode means readers of
  // the copy create no -wal/-shm files beside it.
  auto copy = FT_TRY(connect(out_path, SQLITE_OPEN_READWRITE));
  auto mode = FT_TRY(query_text(copy.get(), out_path, "PRAGMA journal_mode = DELETE"));
  if (mode != "delete") return fail(Errc::database, fmt::format("snapshot stays in journal mode '{}'", mode), out_path);
  return {};
}

Result<SchemaInfo> Store::schema_info() {
  sqlite3* db = impl_->db.get();
  const std::string& path = impl_->path;
  SchemaInfo info;
  info.version = static_cast<int>(FT_TRY(query_int(db, path, "PRAGMA user_version")));
  info.supported = schema_version();
  info.application_id = static_cast<std::uint32_t>(FT_TRY(query_int(db, path, "PRAGMA application_id")));
  info.journal_mode = FT_TRY(query_text(db, path, "PRAGMA journal_mode"));
  {
    auto q = FT_TRY(impl_->query("SELECT version, name, applied_at FROM schema_migrations ORDER BY version"));
    info.migrations = FT_TRY(collect<AppliedMigration>(
        q, [](const Query& r) { return AppliedMigration{r.i32(0), r.text(1), r.text(2)}; }));
  }
  // Table names come from sqlite_master, not from input; counting each needs
  // its name in the SQL text (identifiers cannot be bound).
  std::vector<std::string> tables;
  {
    auto q = FT_TRY(impl_->query(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name"));
    tables = FT_TRY(collect<std::string>(q, [](const Query& r) { return r.text(0); }));
  }
  for (const std::string& t : tables) {
    std::string sql = fmt::format("SELECT count(*) FROM \"{}\"", t);
    info.table_rows.emplace_back(t, FT_TRY(query_int(db, path, sql.c_str())));
  }
  return info;
}

Result<std::string> Store::schema_sql() {
  auto q = FT_TRY(impl_->query(
      "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' ORDER BY type, name"));
  auto statements = FT_TRY(collect<std::string>(q, [](const Query& r) { return r.text(0); }));
  std::string out;
  for (const std::string& s : statements) out += s + ";\n";
  return out;
}

}  // namespace ft::db
