#pragma once
// The scales stage 2 reads with the e4m3 intermediate (fp8 layers), and the
// flag that makes the quantise steps write them. The layout stays
// [T*k, I/128] (moe_args.hpp) in both rules.
//   group: 1 x 128 groups, which change along k, so stage 2 promotes every k-tile.
//   row:   one scale per row (its amax), written into every one of the row's
//          I/128 slots; constant along k, so stage 2 accumulates several or all
//          k-tiles in wgmma and applies the row's scale in its epilogue
//          (per-tensor and per-token layers; moe_stage2.hpp).
namespace ft {

enum class InterScales { group, row };

// MoeArgs::flags bit 2, fp8 layers: the intermediate is quantised with one
// scale per row (InterScales::row): read by moe_quantise_inter and
// reference_quantise_fp8; the layer program sets it on the quantise_inter step
// when stage 2 reads row scales (layer/program.cpp), the runtime and the
// search's reference when they quantise for such a stage 2.
inline constexpr int kFlagInterRowScales = 4;

}  // namespace ft
