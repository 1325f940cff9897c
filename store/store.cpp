#include "store/store.hpp"

#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "generator/version.hpp"
#include "system/subprocess.hpp"

namespace ft::db {
namespace {

constexpr int kBusyTimeoutMs = 30'000;
constexpr std::string_view kSqliteMagic{"SQLite format 3\0", 16};
constexpr std::string_view kRefuseHint = "pass a new path or remove it";

// ---- Statements ------------------------------------------------------------

// A prepared statement; bind by 1-based index, read by 0-based column.
class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(sqlite3_stmt* s) : s_(s) {}
  Stmt(Stmt&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  Stmt& operator=(Stmt&& o) noexcept {
    if (this != &o) {
      sqlite3_finalize(s_);
      s_ = std::exchange(o.s_, nullptr);
    }
    return *this;
  }
  ~Stmt() { sqlite3_finalize(s_); }

  sqlite3_stmt* get() const { return s_; }

 private:
  sqlite3_stmt* s_ = nullptr;
};

// A cached statement in use: reset and unbound when the scope ends, so no read
// transaction stays open behind the caller's back.
class Query {
 public:
  Query(sqlite3* db, sqlite3_stmt* s) : db_(db), s_(s) {}
  Query(Query&& o) noexcept : db_(o.db_), s_(std::exchange(o.s_, nullptr)) {}
  Query(const Query&) = delete;
  Query& operator=(const Query&) = delete;
  ~Query() {
    if (!s_) return;
    sqlite3_reset(s_);
    sqlite3_clear_bindings(s_);
  }

  void bind(int i, std::int64_t v) { sqlite3_bind_int64(s_, i, v); }
  void bind(int i, int v) { sqlite3_bind_int64(s_, i, v); }
  void bind(int i, double v) { sqlite3_bind_double(s_, i, v); }
  void bind(int i, std::string_view v) { sqlite3_bind_text(s_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT); }
  void bind(int i, const std::string& v) { bind(i, std::string_view(v)); }
  void bind(int i, const char* v) { bind(i, std::string_view(v)); }
  void bind(int i, std::nullopt_t) { sqlite3_bind_null(s_, i); }
  template <class T>
  void bind(int i, const std::optional<T>& v) {
    if (v) bind(i, *v);
    else sqlite3_bind_null(s_, i);
  }
  void bind_blob(int i, std::span<const std::byte> b) {
    sqlite3_bind_blob64(s_, i, b.data(), b.size(), SQLITE_TRANSIENT);
  }
  // Empty text as NULL (optional hashes, timestamps).
  void bind_or_null(int i, std::string_view v) {
    if (v.empty()) sqlite3_bind_null(s_, i);
    else bind(i, v);
  }

  // true: a row is ready; false: done.
  Result<bool> step() {
    int rc = sqlite3_step(s_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    return fail(Errc::database, sqlite3_errmsg(db_));
  }
  Status run() {
    auto r = step();
    while (r && *r) r = step();
    if (!r) return std::unexpected(r.error());
    return {};
  }

  std::int64_t i64(int c) const { return sqlite3_column_int64(s_, c); }
  int i32(int c) const { return static_cast<int>(sqlite3_column_int64(s_, c)); }
  double f64(int c) const { return sqlite3_column_double(s_, c); }
  bool null(int c) const { return sqlite3_column_type(s_, c) == SQLITE_NULL; }
  std::string text(int c) const {
    const unsigned char* p = sqlite3_column_text(s_, c);
    return p ? std::string(reinterpret_cast<const char*>(p), static_cast<std::size_t>(sqlite3_column_bytes(s_, c)))
             : std::string();
  }
  std::optional<int> opt_i32(int c) const { return null(c) ? std::nullopt : std::optional<int>(i32(c)); }
  std::optional<std::int64_t> opt_i64(int c) const {
    return null(c) ? std::nullopt : std::optional<std::int64_t>(i64(c));
  }
  std::optional<double> opt_f64(int c) const { return null(c) ? std::nullopt : std::optional<double>(f64(c)); }
  nlohmann::json json(int c) const {
    auto j = nlohmann::json::parse(text(c), nullptr, /*allow_exceptions=*/false);
    return j.is_discarded() ? nlohmann::json::object() : j;
  }
  std::vector<std::byte> blob(int c) const {
    const auto* p = static_cast<const std::byte*>(sqlite3_column_blob(s_, c));
    return std::vector<std::byte>(p, p + sqlite3_column_bytes(s_, c));
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* s_;
};

std::string json_text(const nlohmann::json& j) {
  // Replace invalid UTF-8 instead of throwing: no exceptions below cli/.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// ---- Connections -------------------------------------------------------------

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

Error sqlite_error(sqlite3* db, const std::string& path, std::string_view doing = {}) {
  std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
  if (!doing.empty()) msg = fmt::format("{}: {}", doing, msg);
  return Error{Errc::database, msg, path};
}

Status exec(sqlite3* db, const std::string& path, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db);
    sqlite3_free(err);
    return fail(Errc::database, msg, path);
  }
  return {};
}

// One integer (or text) from a pragma or query without parameters.
Result<std::int64_t> query_int(sqlite3* db, const std::string& path, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK) return std::unexpected(sqlite_error(db, path));
  Stmt s(raw);
  int rc = sqlite3_step(s.get());
  if (rc == SQLITE_ROW) return sqlite3_column_int64(s.get(), 0);
  if (rc == SQLITE_DONE) return 0;
  return std::unexpected(sqlite_error(db, path));
}

Result<std::string> query_text(sqlite3* db, const std::string& path, const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK) return std::unexpected(sqlite_error(db, path));
  Stmt s(raw);
  int rc = sqlite3_step(s.get());
  if (rc == SQLITE_ROW) {
    const unsigned char* p = sqlite3_column_text(s.get(), 0);
    return p ? std::string(reinterpret_cast<const char*>(p)) : std::string();
  }
  if (rc == SQLITE_DONE) return std::string();
  return std::unexpected(sqlite_error(db, path));
}

Result<DbPtr> connect(const std::string& path, int flags) {
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  DbPtr db(raw);
  if (rc != SQLITE_OK) return std::unexpected(sqlite_error(db.get(), path, "cannot open"));
  sqlite3_extended_result_codes(db.get(), 1);
  sqlite3_busy_timeout(db.get(), kBusyTimeoutMs);
  return db;
}

// "file:" URI of a path, with the characters URIs reserve escaped.
std::string file_uri(const std::string& path) {
  std::string out = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c >= 0x7f) out += fmt::format("%{:02X}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

// Size of the -wal file beside a database (0 when there is none).
std::uintmax_t wal_bytes(const std::string& path) {
  std::error_code ec;
  auto n = std::filesystem::file_size(path + "-wal", ec);
  return ec ? 0 : n;
}

Result<DbPtr> connect_immutable(const std::string& path) {
  return connect(file_uri(path) + "?immutable=1", SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
}

// A read-only connection that works on a file this user may not write: a WAL
// database needs its -shm (and -wal) side files, which a reader of another
// user's file cannot create. Then, when no -wal holds data the main file lacks,
// the file is opened immutable (nothing is created beside it); otherwise the
// error says what to do.
Result<DbPtr> connect_reader(const std::string& path) {
  auto db = FT_TRY(connect(path, SQLITE_OPEN_READONLY));
  if (query_int(db.get(), path, "SELECT count(*) FROM sqlite_master")) return db;
  const int rc = sqlite3_extended_errcode(db.get()) & 0xff;
  if (rc != SQLITE_READONLY && rc != SQLITE_CANTOPEN && rc != SQLITE_PERM && rc != SQLITE_IOERR)
    return db;  // another problem: the caller's queries report it
  if (wal_bytes(path) > 0)
    return fail(Errc::database,
                fmt::format("cannot read it: its -wal file holds results not yet in the main file, and this user cannot "
                            "open the -wal/-shm files ({}); read it as its owner, or ask for a 'flytune db snapshot' copy",
                            sqlite3_errmsg(db.get())),
                path);
  return connect_immutable(path);
}

// The pid a run's options_json records (0 when it has none).
long pid_of(const nlohmann::json& options) {
  auto it = options.find("pid");
  return it != options.end() && it->is_number_integer() ? it->get<long>() : 0;
}

std::string this_hostname() {
  std::array<char, 256> host{};
  return gethostname(host.data(), host.size() - 1) == 0 ? std::string(host.data()) : std::string();
}

Error not_flytune(const std::string& path, std::string_view why) {
  return Error{Errc::database, fmt::format("not a flytune database ({}); {}", why, kRefuseHint), path};
}

// What is in a file before anything may write to it.
enum class FileState { missing, empty, existing };

// Inspects an existing SQLite file through a read-only connection and decides
// whether it may be opened; nothing here writes. Returns its schema version
// (0 for an SQLite file with no objects at all).
Result<int> inspect(const std::string& path, int supported) {
  // Without a -wal file every committed page is in the main file, so the
  // inspection may open it immutable: then SQLite creates no -wal/-shm files
  // beside a file it is about to refuse.
  std::error_code ec;
  const bool has_wal = std::filesystem::exists(path + "-wal", ec);
  auto db = FT_TRY(has_wal ? connect_reader(path) : connect_immutable(path));
  auto classify = [&](const Error& e) -> Error {
    int rc = sqlite3_extended_errcode(db.get()) & 0xff;
    if (rc == SQLITE_NOTADB) return not_flytune(path, "not an SQLite file");
    if (rc == SQLITE_CORRUPT)
      return Error{Errc::database,
                   fmt::format("database is corrupt ({}); restore it from a copy or pass a new path", e.message), path};
    return e;
  };
  auto app_id = query_int(db.get(), path, "PRAGMA application_id");
  if (!app_id) return std::unexpected(classify(app_id.error()));
  auto version = query_int(db.get(), path, "PRAGMA user_version");
  if (!version) return std::unexpected(classify(version.error()));
  auto objects = query_int(db.get(), path, "SELECT count(*) FROM sqlite_master");
  if (!objects) return std::unexpected(classify(objects.error()));

  auto id = static_cast<std::uint32_t>(*app_id);
  if (id != 0 && id != kApplicationId)
    return std::unexpected(not_flytune(path, fmt::format("an SQLite file of another application, application_id {:#010x}", id)));
  if (id == 0 && *objects > 0)
    return std::unexpected(not_flytune(path, "an SQLite file of another application"));
  if (*version > supported)
    return fail(Errc::database,
                fmt::format("database schema is version {}, this flytune supports {}; use a newer flytune", *version,
                            supported),
                path);
  if (id == kApplicationId && *version == 0 && *objects > 0)
    return std::unexpected(not_flytune(path, "flytune marker without a schema version"));

  auto check = query_text(db.get(), path, "PRAGMA quick_check(1)");
  if (!check) return std::unexpected(classify(check.error()));
  if (*check != "ok") {
    // One line: "*** in database main ***\nPage 3: ..." becomes "Page 3: ...".
    std::string what = *check;
    if (auto nl = what.find('\n'); nl != std::string::npos && what.starts_with("***")) what.erase(0, nl + 1);
    std::ranges::replace(what, '\n', ' ');
    return fail(Errc::database,
                fmt::format("database is corrupt (quick_check: {}); restore it from a copy or pass a new path", what),
                path);
  }
  return static_cast<int>(*version);
}

Result<FileState> file_state(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  auto st = fs::status(path, ec);
  if (ec && !fs::exists(st)) {
    if (ec == std::errc::no_such_file_or_directory) return FileState::missing;
    return fail(Errc::io, ec.message(), path);
  }
  if (!fs::exists(st)) return FileState::missing;
  if (fs::is_directory(st)) return fail(Errc::invalid_input, "is a directory, not a database file", path);
  if (!fs::is_regular_file(st))
    return fail(Errc::invalid_input, "is not a regular file (a FIFO, socket or device), not a database file", path);
  auto size = fs::file_size(path, ec);
  if (ec) return fail(Errc::io, ec.message(), path);
  if (size == 0) return FileState::empty;
  // Check the header ourselves: SQLite would happily treat some garbage as a
  // database until the first write.
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(Errc::io, "cannot read the file", path);
  std::array<char, 16> header{};
  in.read(header.data(), header.size());
  if (in.gcount() != static_cast<std::streamsize>(header.size()) || size < 512 ||
      std::string_view(header.data(), header.size()) != kSqliteMagic)
    return std::unexpected(not_flytune(path, "not an SQLite file"));
  return FileState::existing;
}

Status migrate(sqlite3* db, const std::string& path, const std::vector<Migration>& all) {
  // A migration may rebuild a table others refer to (SQLite alters no CHECK):
  // foreign keys are not enforced while one runs (the pragma only takes effect
  // outside a transaction), and every key is checked before it commits.
  FT_CHECK(exec(db, path, "PRAGMA foreign_keys = OFF"));
  struct KeysOn {
    sqlite3* db;
    const std::string& path;
    ~KeysOn() { (void)exec(db, path, "PRAGMA foreign_keys = ON"); }
  } keys_on{db, path};
  for (const Migration& m : all) {
    // BEGIN IMMEDIATE takes the write lock first, so a second process opening
    // the same new file waits here and then sees the work already done.
    FT_CHECK(exec(db, path, "BEGIN IMMEDIATE"));
    auto applied = [&]() -> Status {
      int current = static_cast<int>(FT_TRY(query_int(db, path, "PRAGMA user_version")));
      if (current >= m.version) return {};
      if (m.version == 1) FT_CHECK(exec(db, path, fmt::format("PRAGMA application_id = {}", kApplicationId).c_str()));
      std::string sql(m.sql);
      if (auto s = exec(db, path, sql.c_str()); !s)
        return fail(Errc::database, fmt::format("migration {} failed: {}", m.name, s.error().message), path);
      sqlite3_stmt* raw = nullptr;
      if (sqlite3_prepare_v2(db, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?1, ?2, ?3)", -1,
                             &raw, nullptr) != SQLITE_OK)
        return std::unexpected(sqlite_error(db, path, m.name));
      Stmt s(raw);
      Query q(db, raw);
      q.bind(1, m.version);
      q.bind(2, m.name);
      q.bind(3, utc_now());
      FT_CHECK(q.run());
      if (FT_TRY(query_int(db, path, "SELECT count(*) FROM pragma_foreign_key_check")) != 0)
        return fail(Errc::database, fmt::format("migration {} left rows whose references point nowhere", m.name), path);
      return exec(db, path, fmt::format("PRAGMA user_version = {}", m.version).c_str());
    }();
    if (!applied) {
      (void)exec(db, path, "ROLLBACK");
      return applied;
    }
    FT_CHECK(exec(db, path, "COMMIT"));
  }
  return {};
}

// Switching a new file to WAL needs an exclusive lock, and SQLite answers
// SQLITE_BUSY at once, without calling the busy handler, when two connections
// both read the file and then both ask for it (two searches starting on a new
// database): retry for the busy timeout, as every other write waits.
Result<std::string> switch_to_wal(sqlite3* db, const std::string& path) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kBusyTimeoutMs);
  for (;;) {
    auto mode = query_text(db, path, "PRAGMA journal_mode = WAL");
    const int rc = sqlite3_extended_errcode(db) & 0xff;
    if (mode || (rc != SQLITE_BUSY && rc != SQLITE_LOCKED) || std::chrono::steady_clock::now() > deadline) return mode;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Marks the runs of this host whose process is gone (kill -9, a closed output
// pipe, a machine crash) as interrupted, ending them at their last measurement.
Result<std::vector<StaleRun>> close_stale_runs(sqlite3* db, const std::string& path) {
  std::vector<StaleRun> stale;
  {
    sqlite3_stmt* raw = nullptr;
    const char* sql =
        "SELECT id, hostname, options_json, COALESCE((SELECT max(measured_at) FROM measurements m WHERE m.run_id = "
        "runs.id), started_at) FROM runs WHERE status = 'running'";
    if (sqlite3_prepare_v2(db, sql, -1, &raw, nullptr) != SQLITE_OK) return std::unexpected(sqlite_error(db, path));
    Stmt s(raw);
    Query q(db, raw);
    const std::string host = this_hostname();
    for (;;) {
      bool row = FT_TRY(q.step());
      if (!row) break;
      const nlohmann::json options = q.json(2);
      const long pid = pid_of(options);
      const std::string process = options.is_object() ? options.value("process", std::string("flytune")) : "flytune";
      if (q.text(1) != host || pid == 0 || process_alive(pid, process)) continue;
      stale.push_back({q.i64(0), pid, q.text(3)});
    }
  }
  for (const StaleRun& r : stale) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db, "UPDATE runs SET status = 'interrupted', ended_at = ?2 WHERE id = ?1 AND status = 'running'",
                           -1, &raw, nullptr) != SQLITE_OK)
      return std::unexpected(sqlite_error(db, path));
    Stmt s(raw);
    Query q(db, raw);
    q.bind(1, r.id);
    q.bind(2, r.ended_at);
    FT_CHECK(q.run());
  }
  return stale;
}

// ---- Column lists and row readers (shared by every query that returns a record) ----
// FT_<TABLE>_FIELDS(p): a table's columns after its id, in the table's order,
// each with the prefix p ("" or "w."); the INSERTs list them and bind ?1..?N
// in that order. FT_<TABLE>_COLUMNS(p): the id and the fields, as the row
// readers read them.

#define FT_RUN_FIELDS(p)                                                                                     \
  p "started_at, " p "ended_at, " p "status, " p "command_line, " p "flytune_version, " p "git_commit, " p \
    "templates_commit, " p "hostname, " p "strategy, " p "options_json"
#define FT_RUN_COLUMNS(p) p "id, " FT_RUN_FIELDS(p)
constexpr int kRunColumnCount = 11;

RunRecord read_run(const Query& q, int c) {
  RunRecord r;
  r.id = q.i64(c + 0);
  r.started_at = q.text(c + 1);
  r.ended_at = q.text(c + 2);
  r.status = parse_run_status(q.text(c + 3)).value_or(RunStatus::failed);
  r.command_line = q.text(c + 4);
  r.flytune_version = q.text(c + 5);
  r.git_commit = q.text(c + 6);
  r.templates_commit = q.text(c + 7);
  r.hostname = q.text(c + 8);
  r.strategy = q.text(c + 9);
  r.options = q.json(c + 10);
  r.pid = pid_of(r.options);
  if (r.options.is_object()) r.process = r.options.value("process", std::string());
  return r;
}

#define FT_DEVICE_FIELDS(p)                                                                         \
  p "runtime, " p "name, " p "arch, " p "compute_units, " p "memory_bytes, " p "l2_bytes, " p \
    "max_shared_per_block, " p "clock_mhz, " p "driver_version, " p "runtime_version"
#define FT_DEVICE_COLUMNS(p) p "id, " FT_DEVICE_FIELDS(p)
constexpr int kDeviceColumnCount = 11;

DeviceRecord read_device(const Query& q, int c) {
  DeviceRecord d;
  d.id = q.i64(c + 0);
  d.runtime = q.text(c + 1);
  d.name = q.text(c + 2);
  d.arch = q.text(c + 3);
  d.compute_units = q.i32(c + 4);
  d.memory_bytes = q.i64(c + 5);
  d.l2_bytes = q.i64(c + 6);
  d.max_shared_per_block = q.i32(c + 7);
  d.clock_mhz = q.i32(c + 8);
  d.driver_version = q.text(c + 9);
  d.runtime_version = q.text(c + 10);
  return d;
}

#define FT_TOOLCHAIN_FIELDS(p) p "backend, " p "version, " p "path"
#define FT_TOOLCHAIN_COLUMNS(p) p "id, " FT_TOOLCHAIN_FIELDS(p)
constexpr int kToolchainColumnCount = 4;

ToolchainRecord read_toolchain(const Query& q, int c) {
  return ToolchainRecord{q.i64(c), q.text(c + 1), q.text(c + 2), q.text(c + 3)};
}

#define FT_PROBLEM_FIELDS(p) \
  p "key, " p "experts, " p "hidden, " p "inter, " p "topk, " p "dtype, " p "activation, " p "routing"
#define FT_PROBLEM_COLUMNS(p) p "id, " FT_PROBLEM_FIELDS(p)
constexpr int kProblemColumnCount = 9;

ProblemRecord read_problem(const Query& q, int c) {
  ProblemRecord p;
  p.id = q.i64(c + 0);
  p.key = q.text(c + 1);
  p.experts = q.i32(c + 2);
  p.hidden = q.i32(c + 3);
  p.inter = q.i32(c + 4);
  p.topk = q.i32(c + 5);
  p.dtype = q.text(c + 6);
  p.activation = q.text(c + 7);
  p.routing = q.text(c + 8);
  return p;
}

#define FT_VARIANT_FIELDS(p)                                                                                \
  p "kernel_name, " p "target, " p "kind, " p "params_json, " p "source_hash, " p "code_object_hash, " p   \
    "toolchain_id, " p "compile_status, " p "compile_log, " p "compile_seconds, " p "vgprs, " p "agprs, " p \
    "sgprs, " p "regs, " p "lds_bytes, " p "scratch_bytes, " p "spills, " p "occupancy, " p                 \
    "matrix_ops_json, " p "created_at, " p "updated_at"
#define FT_VARIANT_COLUMNS(p) p "id, " FT_VARIANT_FIELDS(p)
constexpr int kVariantColumnCount = 22;

VariantRecord read_variant(const Query& q, int c) {
  VariantRecord v;
  v.id = q.i64(c + 0);
  v.kernel_name = q.text(c + 1);
  v.target = q.text(c + 2);
  v.kind = q.text(c + 3);
  v.params = q.json(c + 4);
  v.source_hash = q.text(c + 5);
  v.code_object_hash = q.text(c + 6);
  v.toolchain_id = q.i64(c + 7);
  v.compile_status = parse_compile_status(q.text(c + 8)).value_or(CompileStatus::compile_error);
  v.compile_log = q.text(c + 9);
  v.compile_seconds = q.opt_f64(c + 10);
  v.resources.vgprs = q.opt_i32(c + 11);
  v.resources.agprs = q.opt_i32(c + 12);
  v.resources.sgprs = q.opt_i32(c + 13);
  v.resources.regs = q.opt_i32(c + 14);
  v.resources.lds_bytes = q.opt_i32(c + 15);
  v.resources.scratch_bytes = q.opt_i32(c + 16);
  v.resources.spills = q.opt_i32(c + 17);
  v.resources.occupancy = q.opt_i32(c + 18);
  v.matrix_ops = q.json(c + 19);
  v.created_at = q.text(c + 20);
  v.updated_at = q.text(c + 21);
  return v;
}

#define FT_MEASUREMENT_FIELDS(p)                                                                              \
  p "run_id, " p "variant_id, " p "problem_id, " p "device_id, " p "tokens, " p "phase, " p "status, " p \
    "error_message, " p "median_us, " p "p10_us, " p "p90_us, " p "min_us, " p "samples, " p "rel_l2_err, " p \
    "max_abs_err, " p "sm_clock_mhz, " p "mem_clock_mhz, " p "temperature_c, " p "pci_bus_id, " p "measured_at"
#define FT_MEASUREMENT_COLUMNS(p) p "id, " FT_MEASUREMENT_FIELDS(p)

MeasurementRecord read_measurement(const Query& q, int c) {
  MeasurementRecord m;
  m.id = q.i64(c + 0);
  m.run_id = q.i64(c + 1);
  m.variant_id = q.i64(c + 2);
  m.problem_id = q.i64(c + 3);
  m.device_id = q.i64(c + 4);
  m.tokens = q.i32(c + 5);
  m.phase = q.text(c + 6);
  m.status = parse_measurement_status(q.text(c + 7)).value_or(MeasurementStatus::launch_error);
  m.error_message = q.text(c + 8);
  m.median_us = q.opt_f64(c + 9);
  m.p10_us = q.opt_f64(c + 10);
  m.p90_us = q.opt_f64(c + 11);
  m.min_us = q.opt_f64(c + 12);
  m.samples = q.i32(c + 13);
  m.rel_l2_err = q.opt_f64(c + 14);
  m.max_abs_err = q.opt_f64(c + 15);
  m.sm_clock_mhz = q.opt_i32(c + 16);
  m.mem_clock_mhz = q.opt_i32(c + 17);
  m.temperature_c = q.opt_f64(c + 18);
  m.pci_bus_id = q.text(c + 19);
  m.measured_at = q.text(c + 20);
  return m;
}

#define FT_WINNER_COLUMNS(p)                                                                                 \
  p "problem_id, " p "device_id, " p "tokens, " p "kind, " p "variant_id, " p "run_id, " p "median_us, " p \
    "p10_us, " p "p90_us, " p "default_variant_id, " p "speedup_vs_default, " p "chosen_at"
constexpr int kWinnerColumnCount = 12;

WinnerRecord read_winner(const Query& q, int c) {
  WinnerRecord w;
  w.problem_id = q.i64(c + 0);
  w.device_id = q.i64(c + 1);
  w.tokens = q.i32(c + 2);
  w.kind = q.text(c + 3);
  w.variant_id = q.i64(c + 4);
  w.run_id = q.i64(c + 5);
  w.median_us = q.f64(c + 6);
  w.p10_us = q.opt_f64(c + 7);
  w.p90_us = q.opt_f64(c + 8);
  w.default_variant_id = q.opt_i64(c + 9);
  w.speedup_vs_default = q.opt_f64(c + 10);
  w.chosen_at = q.text(c + 11);
  return w;
}

// Reads every row of a query with `read`.
template <class T, class Read>
Result<std::vector<T>> collect(Query& q, Read read) {
  std::vector<T> out;
  for (;;) {
    bool row = FT_TRY(q.step());
    if (!row) break;
    out.push_back(read(q));
  }
  return out;
}

}  // namespace

// ---- Enums -------------------------------------------------------------------

std::string_view to_string(RunStatus s) {
  switch (s) {
    case RunStatus::running: return "running";
    case RunStatus::finished: return "finished";
    case RunStatus::interrupted: return "interrupted";
    case RunStatus::failed: return "failed";
  }
  return "failed";
}

std::string_view to_string(CompileStatus s) { return s == CompileStatus::ok ? "ok" : "compile_error"; }

std::string_view to_string(MeasurementStatus s) {
  switch (s) {
    case MeasurementStatus::ok: return "ok";
    case MeasurementStatus::compile_error: return "compile_error";
    case MeasurementStatus::verify_failed: return "verify_failed";
    case MeasurementStatus::launch_error: return "launch_error";
    case MeasurementStatus::timeout: return "timeout";
    case MeasurementStatus::skipped: return "skipped";
  }
  return "launch_error";
}

Result<RunStatus> parse_run_status(std::string_view s) {
  for (RunStatus v : {RunStatus::running, RunStatus::finished, RunStatus::interrupted, RunStatus::failed})
    if (to_string(v) == s) return v;
  return fail(Errc::invalid_input, "unknown run status; expected running, finished, interrupted or failed",
              std::string(s));
}

Result<CompileStatus> parse_compile_status(std::string_view s) {
  for (CompileStatus v : {CompileStatus::ok, CompileStatus::compile_error})
    if (to_string(v) == s) return v;
  return fail(Errc::invalid_input, "unknown compile status; expected ok or compile_error", std::string(s));
}

Result<MeasurementStatus> parse_measurement_status(std::string_view s) {
  for (MeasurementStatus v : {MeasurementStatus::ok, MeasurementStatus::compile_error, MeasurementStatus::verify_failed,
                              MeasurementStatus::launch_error, MeasurementStatus::timeout, MeasurementStatus::skipped})
    if (to_string(v) == s) return v;
  return fail(Errc::invalid_input,
              "unknown measurement status; expected ok, compile_error, verify_failed, launch_error, timeout or skipped",
              std::string(s));
}

std::string utc_now() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  auto ms = duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&secs, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

// ---- Records -----------------------------------------------------------------

RunRecord RunRecord::for_this_build(std::string command_line, std::string strategy, nlohmann::json options) {
  RunRecord r;
  r.command_line = std::move(command_line);
  r.strategy = std::move(strategy);
  r.options = std::move(options);
  r.flytune_version = FLYTUNE_VERSION;
  r.git_commit = FLYTUNE_GIT_COMMIT;
  r.templates_commit = FLYTUNE_TEMPLATES_COMMIT;
  r.hostname = this_hostname();
  r.pid = long(getpid());
  r.process = own_process_name();
  return r;
}

DeviceRecord DeviceRecord::from(const DeviceInfo& info) {
  DeviceRecord d;
  d.runtime = info.runtime;
  d.name = info.name;
  d.arch = info.arch;
  d.compute_units = info.compute_units;
  d.memory_bytes = static_cast<std::int64_t>(info.memory_bytes);
  d.l2_bytes = static_cast<std::int64_t>(info.l2_bytes);
  d.max_shared_per_block = info.max_shared_per_block;
  d.clock_mhz = info.clock_mhz;
  d.driver_version = info.driver_version;
  d.runtime_version = info.runtime_version;
  return d;
}

DeviceRecord DeviceRecord::compile_only(std::string_view target) {
  DeviceRecord d;
  d.runtime = "none";
  d.name = "compile-only";
  d.arch = std::string(target);
  return d;
}

std::string ToolchainRecord::label() const {
  if (version.empty()) return backend;
  if (version == backend || version.starts_with(backend + " ")) return version;
  return backend + " " + version;
}

ProblemRecord ProblemRecord::from(const Problem& p) {
  ProblemRecord r;
  r.key = p.key();
  r.experts = p.experts;
  r.hidden = p.hidden;
  r.inter = p.inter;
  r.topk = p.topk;
  r.dtype = p.dtype_spec();  // "e4m3:per-token" for fp8: the scales are part of the element type
  r.activation = std::string(to_string(p.activation));
  r.routing = p.routing.key();
  return r;
}

Result<Problem> ProblemRecord::to_problem() const {
  Problem p;
  p.name = key;
  p.experts = experts;
  p.hidden = hidden;
  p.inter = inter;
  p.topk = topk;
  const DTypeSpec spec = FT_TRY(parse_dtype_spec(dtype));  // "e4m3:per-token": the scales ride in the dtype
  p.dtype = spec.dtype;
  p.scales = spec.scales;
  if (activation != to_string(p.activation))
    return fail(Errc::invalid_input, fmt::format("problem {}: activation \"{}\" is not one this build implements", key, activation));
  p.routing = FT_TRY(Routing::parse(routing));
  FT_CHECK(p.validate());
  return p;
}

// ---- Store -------------------------------------------------------------------

struct Store::Impl {
  std::string path;
  bool read_only = false;
  std::vector<StaleRun> stale_runs;
  DbPtr db;
  // Statements by their SQL text; every SQL string here is a constant, values
  // are always bound.
  std::unordered_map<std::string_view, Stmt> cache;

  ~Impl() {
    cache.clear();  // finalize before the connection closes
  }

  Result<Query> query(std::string_view sql) {
    auto it = cache.find(sql);
    if (it == cache.end()) {
      sqlite3_stmt* raw = nullptr;
      if (sqlite3_prepare_v3(db.get(), sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &raw,
                             nullptr) != SQLITE_OK)
        return std::unexpected(sqlite_error(db.get(), path));
      it = cache.emplace(sql, Stmt(raw)).first;
    }
    return Query(db.get(), it->second.get());
  }

  Status writable(std::string_view what) const {
    if (read_only) return fail(Errc::internal, fmt::format("{} on a database opened read-only", what), path);
    return {};
  }

  Error error(const Error& e, std::string_view doing) const {
    Error out = e;
    out.message = fmt::format("{}: {}", doing, e.message);
    out.context = path;
    return out;
  }
};

Store::Store(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Store::Store(Store&&) noexcept = default;
Store& Store::operator=(Store&&) noexcept = default;
Store::~Store() = default;

const std::string& Store::path() const { return impl_->path; }
const std::vector<StaleRun>& Store::stale_runs() const { return impl_->stale_runs; }
bool Store::read_only() const { return impl_->read_only; }

Result<Store> Store::open(const std::string& path, OpenMode mode) {
  const auto all = FT_TRY(migrations());
  const int supported = all.back().version;
  const FileState state = FT_TRY(file_state(path));
  if (state == FileState::missing && mode != OpenMode::create)
    return fail(Errc::not_found, "no such database; run 'flytune search' first", path);
  if (state == FileState::missing) {
    // SQLite would say only "unable to open database file".
    const auto folder = std::filesystem::path(path).parent_path();
    std::error_code ec;
    if (!folder.empty() && !std::filesystem::is_directory(folder, ec))
      return fail(Errc::not_found,
                  fmt::format("the folder '{}' does not exist; create it first or give another path", folder.string()),
                  path);
  }
  if (state == FileState::empty && mode == OpenMode::read_only)
    return fail(Errc::invalid_input, "empty file, no flytune results yet; run 'flytune search' first", path);

  int version = 0;
  if (state == FileState::existing) version = FT_TRY(inspect(path, supported));
  if (mode == OpenMode::read_only && version == 0)
    return fail(Errc::invalid_input, "an SQLite file without flytune tables; run 'flytune search' first", path);
  if (mode == OpenMode::read_only && version < supported)
    return fail(Errc::database,
                fmt::format("database schema is version {}, this flytune reads version {}; open it once with "
                            "'flytune search --db {}' to upgrade it",
                            version, supported, path),
                path);

  auto impl = std::make_unique<Impl>();
  impl->path = path;
  impl->read_only = mode == OpenMode::read_only;
  int flags = impl->read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE;
  if (mode == OpenMode::create) flags |= SQLITE_OPEN_CREATE;
  impl->db = FT_TRY(impl->read_only ? connect_reader(path) : connect(path, flags));
  sqlite3* db = impl->db.get();

  FT_CHECK(exec(db, path, "PRAGMA foreign_keys = ON"));
  if (impl->read_only) {
    FT_CHECK(exec(db, path, "PRAGMA query_only = ON"));
  } else {
    auto journal = FT_TRY(switch_to_wal(db, path));
    if (journal != "wal")
      return fail(Errc::database, fmt::format("cannot switch to WAL mode (journal mode stays '{}')", journal), path);
    // FULL: a committed measurement survives a machine crash (a GPU fault can
    // take the host down), not only a process crash.
    FT_CHECK(exec(db, path, "PRAGMA synchronous = FULL"));
    FT_CHECK(migrate(db, path, all));
    impl->stale_runs = FT_TRY(close_stale_runs(db, path));
  }
  return Store(std::move(impl));
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

namespace {
// Runs an INSERT ... RETURNING id and yields the id.
Result<std::int64_t> returning_id(Query& q) {
  bool row = FT_TRY(q.step());
  if (!row) return fail(Errc::database, "statement returned no id");
  return q.i64(0);
}
}  // namespace

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

namespace {

// A variant row's columns after nothing: kernel_name .. matrix_ops_json as
// ?1..?19 (the statements add created_at/updated_at after them).
void bind_variant(Query& q, const VariantRecord& v) {
  const Resources& r = v.resources;
  q.bind(1, v.kernel_name);
  q.bind(2, v.target);
  q.bind(3, v.kind);
  q.bind(4, json_text(v.params));
  q.bind(5, v.source_hash);
  q.bind_or_null(6, v.code_object_hash);
  q.bind(7, v.toolchain_id);
  q.bind(8, to_string(v.compile_status));
  q.bind(9, v.compile_log);
  q.bind(10, v.compile_seconds);
  q.bind(11, r.vgprs);
  q.bind(12, r.agprs);
  q.bind(13, r.sgprs);
  q.bind(14, r.regs);
  q.bind(15, r.lds_bytes);
  q.bind(16, r.scratch_bytes);
  q.bind(17, r.spills);
  q.bind(18, r.occupancy);
  q.bind(19, json_text(v.matrix_ops));
}

// A measurement row's columns in the table's order, run_id .. measured_at as ?1..?20.
void bind_measurement(Query& q, const MeasurementRecord& m, const std::string& measured_at) {
  q.bind(1, m.run_id);
  q.bind(2, m.variant_id);
  q.bind(3, m.problem_id);
  q.bind(4, m.device_id);
  q.bind(5, m.tokens);
  q.bind(6, m.phase);
  q.bind(7, to_string(m.status));
  q.bind(8, m.error_message);
  q.bind(9, m.median_us);
  q.bind(10, m.p10_us);
  q.bind(11, m.p90_us);
  q.bind(12, m.min_us);
  q.bind(13, m.samples);
  q.bind(14, m.rel_l2_err);
  q.bind(15, m.max_abs_err);
  q.bind(16, m.sm_clock_mhz);
  q.bind(17, m.mem_clock_mhz);
  q.bind(18, m.temperature_c);
  q.bind(19, m.pci_bus_id);
  q.bind(20, measured_at);
}

}  // namespace

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
      "INSERT INTO winners (" FT_WINNER_COLUMNS("") ") VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12) "
      "ON CONFLICT (problem_id, device_id, tokens, kind) DO UPDATE SET variant_id = excluded.variant_id, "
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
      "(?4 IS NULL OR w.tokens = ?4) AND (?5 IS NULL OR w.kind = ?5) "
      "ORDER BY p.key, d.arch, d.name, w.device_id, w.kind, w.tokens"));
  q.bind(1, f.problem_key);
  q.bind(2, f.device_id);
  q.bind(3, f.arch);
  q.bind(4, f.tokens);
  q.bind(5, f.kind);
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
