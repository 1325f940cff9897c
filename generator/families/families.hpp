#pragma once
// The registered kernel families (generator/family.hpp) and the standard axes
// they share. A standard axis is one whose meaning the layer program relies on
// (tile_m, tile_n, tile_k, split_k, reduce, weight_in_stage1, layout,
// tiles_per_block: Family::launch and Family::contract read them by key); each
// family picks its own values, presets and --space spelling for them.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "generator/family.hpp"

namespace ft {

const Family& tiled_family();  // families/tiled.cpp: wave-level mfma / mma.sync GEMM
const Family& wgmma_family();  // families/wgmma.cpp: Hopper warpgroup GEMM
const Family& onelaunch_family();  // families/onelaunch.cpp: the whole layer in one persistent launch

// The register estimate of the tiled GEMM (templates/ft/tiled_gemm.hpp) of
// variant v's tiles and warps at `tile_n` columns of `weight_matrices` weights.
int tiled_registers(const Variant& v, int tile_n, int weight_matrices);

namespace axes {

// Presets of an axis: default, wide (empty: as default), small (empty: as default).
struct Values {
  std::vector<AxisValue> defaults, wide = {}, small = {};
};

// The kernel-name order of the standard tokens (Axis::name_rank).
enum Rank : int { kTileM, kTileN, kTileK, kWarps, kAtom, kStages, kReduce, kSplitK, kWeight, kLayout, kProducer, kTiles,
                  kScales, kInterStore, kInterScales, kPromote, kOneLaunch };

Axis atom();
// tile_m / tile_n / tile_k: "_m64", "n128", "k64" in the name.
Axis tile_m(std::string_view spelling, Values v, int initial);
Axis tile_n(std::string_view spelling, Values v, int initial);
Axis tile_k(std::string_view spelling, Values v, int initial);
// warps_m x warps_n: "_w2x2".
Axis warps(std::string_view spelling, Values v, AxisValue initial);
// LDS buffers / ring depth: "_s2".
Axis stages(std::string_view spelling, Values v, int initial);
// A producer warpgroup ("_ws"); tiles each block computes in turn ("_t8"),
// which applies only with a producer warpgroup.
Axis warp_specialized(std::string_view spelling, Values v);
Axis tiles_per_block(std::string_view spelling, Values v);
// Where the routed weight is applied (stage 1: "_rw"; stage 2: "_norw").
Axis weight_in_stage1(Values v);
// Stage 2 only: split-K ("_sk4") and the reduction ("_atomic" / "_partials").
Axis split_k(Values v);
Axis reduce(Values v);
// The weight layout read ("_shuf", "_tiled"); `derived` (non-null) makes it
// follow the axes before it instead of being enumerated.
Axis layout(std::string_view spelling, Values v, AxisValue (*derived)(const Variant&) = nullptr);
// fp8 variants only (present for e4m3, absent from 16-bit names, JSON and
// Configs): the layer's scales, which the problem decides ("_tensor",
// "_token", "_block128"), and stage 1's quantise-on-store ("_qstore": the
// intermediate leaves the epilogue as e4m3 with its group scales).
Axis scales();
Axis inter_store(Values v);
// fp8 stage 2 only: the intermediate's scales it reads (ft::InterScales):
// 1 x 128 groups (no token), or one per row ("_rowscale": constant along k, so
// the GEMM may accumulate without promoting; the layer's quantise_inter step
// then writes row scales, layer/program.cpp). Must precede promote().
Axis inter_scales(Values v);
// fp8 only: how often the GEMM promotes its accumulators into a second fp32
// set (templates/ft/moe_scales.hpp promote_every_of): every n k-tiles (1, no
// token; "_promote<n>"), or 0, never ("_fastacc": one set, the scales applied
// in the epilogue). Enumerated where fp8::promote_may_vary, else 1; must
// follow scales() in a family's axes.
Axis promote(Values v);
// A wgmma k-tile: one 128-byte swizzle row of the operand type (64 16-bit
// values, 128 fp8 codes); derived, not enumerated.
AxisValue k_tile_of_row(const Variant& v);

}  // namespace axes

// What the fp8 axes of a variant ask of its kernel (false / none for 16-bit variants).
namespace fp8 {
Scales scales(const Variant& v);
bool quantise_on_store(const Variant& v);
// Whether the layer's intermediate has the caller's static scale (Scales::static_tensor):
// its stage 1 quantises on store with it (no inter_store axis, no quantise_inter step).
bool static_inter(const Variant& v);
// Whether a stage 2 reads the intermediate with one scale per row (InterScales::row).
bool inter_row_scales(const Variant& v);
// Whether the variant's scales are constant along k, so its GEMM may promote
// other than every k-tile: stage 1 with per-tensor or per-token scales, and
// stage 2 reading row scales in those modes (stage 2's 1 x 128 group scales
// and block128's change with each group).
bool promote_may_vary(const Variant& v);
// How often its GEMM promotes the accumulators into the second fp32 set (a
// second accumulator set): every n k-tiles, 0 never; the promote axis where
// the family has it, else every k-tile (the kernels' default); 0 for 16-bit.
int promote_every(const Variant& v);
bool promotes(const Variant& v);
// Shared-memory bytes of quantise-on-store's staging (the tile in fp32 and a
// partial amax per 8 values: templates/ft/moe_stage1.hpp, kStagedBytes); 0 without it.
int staged_bytes(const Variant& v);
// The rules the fp8 axes put on any family's tiles, or nullopt.
std::optional<std::string> shape_rules(const Variant& v);
}  // namespace fp8

namespace axes {

}  // namespace axes
}  // namespace ft
