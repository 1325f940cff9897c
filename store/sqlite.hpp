#pragma once
// The SQLite layer of the store (internal to store/): prepared statements, a
// statement in use, connections (read-write, reader, immutable) and their
// errors. Nothing here knows a flytune table; store/rows.hpp maps rows,
// store/open.cpp opens and migrates, store/writes.cpp and store/queries.cpp
// hold the Store's statements.
#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include <nlohmann/json.hpp>

#include "base/error.hpp"

namespace ft::db::sql {

inline constexpr int kBusyTimeoutMs = 30'000;

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


// JSON as the text a column holds (invalid UTF-8 replaced: no exceptions below cli/).
std::string json_text(const nlohmann::json& j);

// ---- Connections -------------------------------------------------------------

struct DbCloser {
  void operator()(sqlite3* db) const { sqlite3_close_v2(db); }
};
using DbPtr = std::unique_ptr<sqlite3, DbCloser>;

Error sqlite_error(sqlite3* db, const std::string& path, std::string_view doing = {});
Status exec(sqlite3* db, const std::string& path, const char* sql);
// One integer (or text) from a pragma or query without parameters.
Result<std::int64_t> query_int(sqlite3* db, const std::string& path, const char* sql);
Result<std::string> query_text(sqlite3* db, const std::string& path, const char* sql);
Result<DbPtr> connect(const std::string& path, int flags);
// "file:" URI of a path, with the characters URIs reserve escaped.
std::string file_uri(const std::string& path);
// Size of the -wal file beside a database (0 when there is none).
std::uintmax_t wal_bytes(const std::string& path);
Result<DbPtr> connect_immutable(const std::string& path);
// A read-only connection that works on a file this user may not write (see sqlite.cpp).
Result<DbPtr> connect_reader(const std::string& path);

}  // namespace ft::db::sql
