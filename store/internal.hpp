#pragma once
// The Store's connection and statement cache (internal to store/): what
// store/open.cpp makes and the statements in store/writes.cpp and
// store/queries.cpp use.
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "store/sqlite.hpp"
#include "store/store.hpp"

namespace ft::db {

struct Store::Impl {
  std::string path;
  bool read_only = false;
  std::vector<StaleRun> stale_runs;
  sql::DbPtr db;
  // Statements by their SQL text; every SQL string here is a constant, values
  // are always bound.
  std::unordered_map<std::string_view, sql::Stmt> cache;

  ~Impl() {
    cache.clear();  // finalize before the connection closes
  }

  Result<sql::Query> query(std::string_view text) {
    auto it = cache.find(text);
    if (it == cache.end()) {
      sqlite3_stmt* raw = nullptr;
      if (sqlite3_prepare_v3(db.get(), text.data(), static_cast<int>(text.size()), SQLITE_PREPARE_PERSISTENT, &raw,
                             nullptr) != SQLITE_OK)
        return std::unexpected(sql::sqlite_error(db.get(), path));
      it = cache.emplace(text, sql::Stmt(raw)).first;
    }
    return sql::Query(db.get(), it->second.get());
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

// Runs an INSERT ... RETURNING id and yields the id.
Result<std::int64_t> returning_id(sql::Query& q);

}  // namespace ft::db
