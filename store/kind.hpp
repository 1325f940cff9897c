#pragma once
// The kind of a variants row and of a winner: one value per thing the store
// records a variant for. The database's `kind` columns hold to_string's text
// ("moe1", "moe2", "layer", "support"), which keys rows and winners and is
// never renamed; code names a kind by this enum, not by its spelling.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "generator/family.hpp"

namespace ft::db {

enum class Kind : std::uint8_t {
  moe1,     // a stage-1 kernel variant (StageRole::stage1)
  moe2,     // a stage-2 kernel variant (StageRole::stage2)
  layer,    // a layer winner: a pair of stage variants timed together (layer_record.hpp)
  support,  // a target's support unit (align, reduce, shuffle, references, fill, quantise)
};

constexpr std::string_view to_string(Kind k) {
  switch (k) {
    case Kind::moe1: return "moe1";
    case Kind::moe2: return "moe2";
    case Kind::layer: return "layer";
    case Kind::support: return "support";
  }
  return "";
}
// The database text as a std::string (the records' and filters' field type).
inline std::string kind_text(Kind k) { return std::string(to_string(k)); }

constexpr std::optional<Kind> parse_kind(std::string_view s) {
  for (Kind k : {Kind::moe1, Kind::moe2, Kind::layer, Kind::support})
    if (to_string(k) == s) return k;
  return std::nullopt;
}

// A stage's kind; to_string(kind_of(r)) is to_string(r).
constexpr Kind kind_of(StageRole r) { return r == StageRole::stage1 ? Kind::moe1 : Kind::moe2; }

// Whether a record's kind column holds `k`.
inline bool is(std::string_view text, Kind k) { return text == to_string(k); }

}  // namespace ft::db
