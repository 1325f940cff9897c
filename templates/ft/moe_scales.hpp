#pragma once
// The fp8 side of the stage kernels: the Config members only fp8 variants have
// (the generator emits scales and inter_store for e4m3 variants alone, so
// 16-bit units are unchanged), and the scales a k-group is promoted with
// (the Gemms' run_scaled: ks.a(tile row, group), ks.w(weight matrix, group)).
// Scale tensors and their layouts: templates/ft/moe_args.hpp, ft::Scales.
namespace ft {

template <class Cfg>
FT_HOST_DEVICE constexpr Scales scales_of() {
  if constexpr (requires { Cfg::scales; }) return Cfg::scales;
  else return Scales::none;
}
template <class Cfg>
FT_HOST_DEVICE constexpr InterStore inter_store_of() {
  if constexpr (requires { Cfg::inter_store; }) return Cfg::inter_store;
  else return InterStore::bf16;
}
// Stage 2's intermediate scales (InterScales, moe_args.hpp): group for Configs
// without the member (16-bit stages, the tiled family's, hand-written ones).
template <class Cfg>
FT_HOST_DEVICE constexpr InterScales inter_scales_of() {
  if constexpr (requires { Cfg::inter_scales; }) return Cfg::inter_scales;
  else return InterScales::group;
}
// A stage on fp8 codes (its atom's operands are one byte).
template <class Cfg>
FT_HOST_DEVICE constexpr bool fp8_stage() {
  return sizeof(typename Cfg::Atom::storage) == 1;
}
// How often an fp8 stage's GEMM promotes its accumulators into the second
// fp32 set: every `n` k-tiles (1: each 128-deep scale group), or 0: never
// (fast accumulation: one set, the scales applied in the epilogue). Only
// scales constant along k allow other than 1 (stage 1 per-tensor and
// per-token, stage 2 reading row scales; the family's legality,
// generator/families/standard_axes.cpp fp8::shape_rules). 0 for 16-bit stages; 1 for fp8 Configs without the
// member (the tiled family's, hand-written ones).
template <class Cfg>
FT_HOST_DEVICE constexpr int promote_every_of() {
  if constexpr (!fp8_stage<Cfg>()) return 0;
  else if constexpr (requires { Cfg::promote; }) return Cfg::promote;
  else return 1;
}

// Quantise-on-store's needs (fp8, whole 128-column groups per tile, every
// thread in the epilogue); true without it (and so for Configs that name no
// fp8 members, e.g. hand-written ones).
template <class Cfg>
FT_HOST_DEVICE constexpr bool quantise_on_store_fits() {
  if constexpr (inter_store_of<Cfg>() == InterStore::fp8)
    return fp8_stage<Cfg>() && Cfg::tile_n % kScaleGroup == 0 && !Cfg::warp_specialized;
  else
    return true;
}

// Stage 1, block128: X's 1 x 128 group of the gathered row's token, and the
// 128 x 128 blocks of W1 that hold the tile's gate and up columns (tile_n
// divides 128, so a tile's columns of one matrix share their block row).
struct Stage1BlockScales {
  const i32* ids;          // the tile's sorted pair ids
  int pairs, topk, groups; // groups: H / 128
  const float* x_scales;   // [T, H/128]
  const float* w_rows[2];  // gate and up: the block row's H/128 scales
  FT_DEVICE float a(int row, int g) const {
    const int id = ids[row];
    return id < pairs ? x_scales[(long long)(id / topk) * groups + g] : 0.0f;
  }
  FT_DEVICE float w(int nb, int g) const { return w_rows[nb][g]; }
};

// Stage 1 with per-tensor or per-token scales, promoting (promote_every_of
// > 0): promotion with unit scales (the scales are applied in the epilogue).
// Promoting into a second fp32 set bounds the error of Hopper's
// reduced-precision fp8 accumulation (tests/gpu/atom_crosscheck_test.cpp
// measured it) at the cost of a second accumulator set; promote = 0 keeps one
// set and lets the verification decide whether the accumulation is exact
// enough. (The C7515 serialisation once seen on the non-promoting e4m3 loop
// came from its zero-tile path, not from fp8: wgmma_gemm.hpp run_together.)
// Unit scales are the same for every group, so they may be promoted every
// n > 1 k-tiles.
struct UnitScales {
  static constexpr bool kConstantAlongK = true;
  FT_DEVICE float a(int, int) const { return 1.0f; }
  FT_DEVICE float w(int, int) const { return 1.0f; }
};

// Stage 2 (every fp8 mode, InterScales::group): the intermediate's 1 x 128 group scales of the
// tile's rows; W2's 128 x 128 block scales in block128 mode, else 1 (per-tensor
// and per-channel W2 scales are applied in the epilogue).
struct Stage2Scales {
  const i32* ids;
  int pairs, groups;          // groups: I / 128
  const float* inter_scales;  // [T*k, I/128]
  const float* w_row;         // block128: the block row's I/128 scales; else null
  FT_DEVICE float a(int row, int g) const {
    const int id = ids[row];
    return id < pairs ? inter_scales[(long long)id * groups + g] : 0.0f;
  }
  FT_DEVICE float w(int, int g) const { return w_row ? w_row[g] : 1.0f; }
};

}  // namespace ft
