#pragma once
// One point of the variant space: a kernel family (generator/family.hpp), the
// role the kernel plays in a layer, and one value for each of the family's
// axes, in the family's order. Problem sizes are run-time arguments, so a
// variant serves every problem whose shapes it divides. name(), to_json(),
// from_json() and the emitted Config are generic over the family's axes.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "generator/atoms.hpp"
#include "base/error.hpp"
#include "generator/family.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"

namespace ft {

class Variant {
 public:
  Variant() = default;
  // A variant of the atom's family (family_of), or of `family`, with every
  // axis at its initial value.
  static Variant of(const Target& target, StageRole role, const AtomInfo& atom);
  static Variant of(const Target& target, StageRole role, const AtomInfo& atom, const Family* family);

  const Target* target = nullptr;
  const Family* family = nullptr;
  StageRole role = StageRole::stage1;
  DType dtype = DType::bf16;
  std::vector<AxisValue> values;  // one per family->axes(), in that order

  // An axis's value by key (pair axes answer to their pair keys with one
  // half). Internal error for a key the family does not have.
  int get(std::string_view key) const;
  bool has(std::string_view key) const;
  // Sets an axis (or one half of a pair) by key; returns *this for chaining.
  Variant& set(std::string_view key, int value);
  const AtomInfo* atom() const;

  int threads() const { return family->threads(*this); }
  int lds_bytes() const { return family->lds_bytes(*this); }
  int lds_limit() const { return family->lds_limit(*this); }
  int register_estimate() const { return family->register_estimate(*this); }
  StageContract contract() const { return family->contract(*this); }
  int weight_matrices() const { return role == StageRole::stage1 ? 2 : 1; }

  // The database key, exported symbol and golden-file name, e.g.
  // ft_gfx942_moe1_bf16_m64n128k64_w2x2_mfma16x16x16_s2.
  std::string name() const;
  nlohmann::json to_json() const;
  // Records of every flytune version: the family from "family", or for older
  // records from the atom; keys of axes added later take their initial value.
  static Result<Variant> from_json(const nlohmann::json& j);

  bool operator==(const Variant& o) const {
    return target == o.target && family == o.family && role == o.role && dtype == o.dtype && values == o.values;
  }
};

}  // namespace ft
