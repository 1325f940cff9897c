// Opening a store: what a file holds before anything writes to it, the
// refusal of foreign, corrupt or newer files, the migrations, WAL, and the
// runs a killed process left open.
#include <sqlite3.h>

#include <array>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <fmt/format.h>

#include "store/internal.hpp"
#include "store/migrations.hpp"
#include "store/rows.hpp"
#include "system/subprocess.hpp"

namespace ft::db {
using namespace sql;
namespace {

constexpr std::string_view kSqliteMagic{"SQLite format 3\0", 16};
constexpr std::string_view kRefuseHint = "pass a new path or remove it";

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
}  // namespace


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

}  // namespace ft::db
