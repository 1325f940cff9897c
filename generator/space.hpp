#pragma once
// The variant space of a target for a problem, and the legality rules that cut
// it down to what the target can run.
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "generator/error.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"

namespace ft {

// Values of each axis; the space is their product (per kind), then legality.
struct SpaceOptions {
  std::vector<KernelKind> kinds{KernelKind::moe1, KernelKind::moe2};
  std::vector<std::string> atoms;  // atom ids; empty: every atom of the target for the dtype
  std::vector<int> tile_m{16, 32, 64, 128};
  std::vector<int> tile_n{64, 128};
  std::vector<int> tile_k{32, 64};
  std::vector<std::pair<int, int>> warps{{1, 4}, {2, 2}};
  std::vector<int> stages{2};
  std::vector<int> split_k{1, 4};              // stage 2
  std::vector<bool> weight_in_stage1{false};
  std::vector<Reduction> reduce{Reduction::atomic};  // stage 2
  std::vector<WeightLayoutKind> layout{WeightLayoutKind::plain};
  // The Hopper wgmma family has its own tile, warp and stage axes (tile_k is
  // always 64: one 128-byte swizzle row); the axes above apply to the others.
  std::vector<int> wgmma_tile_m{64, 128, 192};  // 192: three consumer warpgroups (12x1)
  std::vector<int> wgmma_tile_n{32, 64, 128, 256};  // 32: stage 1 with N = 64, more blocks at decode
  std::vector<std::pair<int, int>> wgmma_warps{{4, 1}, {8, 1}, {12, 1}};
  // on: a producer warpgroup feeds mbarrier-synchronised consumers, weights
  // moved by bulk copies from the tiled layout (wins prefill); off: the shared
  // cp.async ring on plain weights (wins decode). The wgmma family's layout
  // follows this axis; `layout` applies to the other families.
  std::vector<bool> wgmma_producer{false, true};
  // Tiles each producer-warpgroup block computes in turn (1: one tile, the
  // grid covers them all; n > 1: a persistent grid of ceil(tiles / n) blocks
  // whose rings run on from one tile into the next).
  std::vector<int> wgmma_tiles{1, 8};
  std::vector<int> wgmma_stages{3, 4, 7};  // deeper rings keep more bytes in flight; 3 lets two blocks share an SM

  // "default", "wide", "small", then ';'-separated overrides "axis=v1,v2", e.g.
  // "wide;tile_m=16,64;warps=2x2". Axes: kind, atom, tile_m, tile_n, tile_k,
  // warps, stages, split_k, weight (stage1|stage2), reduce, layout (plain,
  // shuffled; not for wgmma), and the
  // wgmma family's wgmma_tile_m, wgmma_tile_n, wgmma_warps, wgmma_stages,
  // wgmma_producer (off, on).
  static Result<SpaceOptions> parse(std::string_view text);
  static SpaceOptions wide();
  static SpaceOptions small();  // a handful of variants, for quick checks
};

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
Result<Variant> default_variant(const Target& target, const Problem& problem, KernelKind kind);

}  // namespace ft
