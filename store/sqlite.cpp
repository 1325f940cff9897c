#include "store/sqlite.hpp"

#include <filesystem>

#include <fmt/format.h>

namespace ft::db::sql {

std::string json_text(const nlohmann::json& j) {
  // Replace invalid UTF-8 instead of throwing: no exceptions below cli/.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Error sqlite_error(sqlite3* db, const std::string& path, std::string_view doing) {
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


}  // namespace ft::db::sql
