#pragma once
// The variant space of a target for a problem: the product of every
// registered family's axes (generator/family.hpp) for each stage role, cut
// down by the legality rules to what the target can run.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "generator/family.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"

namespace ft {

struct SpaceOptions {
  Preset preset = Preset::default_;
  std::vector<StageRole> roles{StageRole::stage1, StageRole::stage2};
  // Values given for an axis by its --space spelling ("tile_m", or
  // "moe1.tile_m" for one stage kind); they replace the preset's for every
  // family that spells an axis so (the atom axis: every atom of the target
  // the family takes, unless given here).
  std::vector<std::pair<std::string, std::vector<AxisValue>>> overrides;

  // "default", "wide", "small", then ';'-separated overrides "axis=v1,v2", e.g.
  // "wide;tile_m=16,64;warps=2x2". A preset word starts again from that
  // preset. Axes: kind (moe1, moe2) and every spelling the families declare
  // (space_axis_spellings()). "moe1.axis=..." / "moe2.axis=..." give an axis's
  // values for that stage kind alone (not kind or atom), ahead of "axis=...":
  // "moe1.wgmma_tile_m=192;moe2.wgmma_tile_m=128".
  static Result<SpaceOptions> parse(std::string_view text);
  static SpaceOptions wide();
  static SpaceOptions small();  // a handful of variants, for quick checks

  // The values axis `a` takes under these options (not for the atom axis):
  // for every kind, or for variants of `role` (its "moe1.axis" values first).
  const std::vector<AxisValue>& values(const Axis& a) const;
  const std::vector<AxisValue>& values(const Axis& a, StageRole role) const;
  // The atoms given with atom=..., or nullptr.
  const std::vector<AxisValue>* atoms() const;
};

// Every --space axis name: "kind", then the families' spellings in registry order.
std::vector<std::string_view> space_axis_spellings();

struct Rejection {
  Variant variant;
  std::string reason;
};

struct Space {
  std::vector<Variant> legal;
  std::vector<Rejection> rejected;
};

// Why `v` cannot run on its target for `problem`, or nullopt when it can.
std::optional<std::string> why_illegal(const Variant& v, const Problem& problem);

Space enumerate_space(const Target& target, const Problem& problem, const SpaceOptions& options);

// The variant used as the baseline for speedups: a middle-of-the-road tile every
// target runs (64 x 64 x 32, ping-pong, first atom of the target).
Result<Variant> default_variant(const Target& target, const Problem& problem, StageRole role);

}  // namespace ft
