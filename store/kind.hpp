#pragma once
// The kind of a variants row and of a winner, and the pass of a winner: one value per thing the store
// records a variant for. The database's `kind` columns hold to_string's text
// ("moe1", "moe2", "layer", "support", "grad", "backward"), which keys rows and winners and is
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
  grad,     // a backward GEMM configuration (generator/backward_gemm.hpp): one unit, for every role of its GEMM
  backward, // a backward program: a configuration per role of op::moe_backward, timed together
};

constexpr std::string_view to_string(Kind k) {
  switch (k) {
    case Kind::moe1: return "moe1";
    case Kind::moe2: return "moe2";
    case Kind::layer: return "layer";
    case Kind::support: return "support";
    case Kind::grad: return "grad";
    case Kind::backward: return "backward";
  }
  return "";
}
// The database text as a std::string (the records' and filters' field type).
inline std::string kind_text(Kind k) { return std::string(to_string(k)); }

constexpr std::optional<Kind> parse_kind(std::string_view s) {
  for (Kind k : {Kind::moe1, Kind::moe2, Kind::layer, Kind::support, Kind::grad, Kind::backward})
    if (to_string(k) == s) return k;
  return std::nullopt;
}

// A stage's kind; to_string(kind_of(r)) is to_string(r).
constexpr Kind kind_of(StageRole r) { return r == StageRole::stage1 ? Kind::moe1 : Kind::moe2; }

// The pass a winner belongs to: the layer's forward kernels or its backward
// program (flytune search --pass). The winners' `pass` column holds
// to_string's text (migration 0003_add_pass); every winner before it is forward.
enum class Pass : std::uint8_t { forward, backward };

constexpr std::string_view to_string(Pass p) { return p == Pass::forward ? "forward" : "backward"; }

constexpr std::optional<Pass> parse_pass(std::string_view s) {
  for (Pass p : {Pass::forward, Pass::backward})
    if (to_string(p) == s) return p;
  return std::nullopt;
}

// Whether a record's kind column holds `k`.
inline bool is(std::string_view text, Kind k) { return text == to_string(k); }

}  // namespace ft::db
