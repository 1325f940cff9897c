#include "store/migrations.hpp"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace ft::db {

Result<std::vector<Migration>> parse_migrations(std::span<const EmbeddedFile> files) {
  std::vector<Migration> out;
  for (const EmbeddedFile& f : files) {
    std::string_view path = f.path;
    // NNNN_verb_noun.sql: four digits, an underscore, a lower-case name.
    bool well_formed = path.size() > 9 && path.ends_with(".sql") && path[4] == '_';
    for (std::size_t i = 0; well_formed && i < 4; ++i) well_formed = std::isdigit(static_cast<unsigned char>(path[i]));
    for (std::size_t i = 5; well_formed && i + 4 < path.size(); ++i) {
      char c = path[i];
      well_formed = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    }
    if (!well_formed)
      return fail(Errc::internal, "migration file name must be NNNN_verb_noun.sql", std::string(path));
    Migration m;
    m.version = std::stoi(std::string(path.substr(0, 4)));
    m.name = std::string(path.substr(0, path.size() - 4));
    m.sql = f.text;
    out.push_back(std::move(m));
  }
  std::ranges::sort(out, {}, &Migration::version);
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].version != static_cast<int>(i) + 1)
      return fail(Errc::internal,
                  fmt::format("migration numbers must run 1, 2, 3, ... without gaps or repeats; expected {}, found {}",
                              i + 1, out[i].version),
                  out[i].name);
  if (out.empty()) return fail(Errc::internal, "no schema migrations are embedded in this build");
  return out;
}

Result<std::vector<Migration>> migrations() { return parse_migrations(migration_files()); }

int schema_version() {
  auto m = migrations();
  return m ? m->back().version : 0;
}

}  // namespace ft::db
