#pragma once
// The argument of a stage kernel that reads its weights through a tensor map
// (WeightLayout::mapped, sm_90a's producer warpgroup, wgmma_gemm.hpp): the map
// of the weight matrix the stage multiplies by (stage 1: W1 as [E * 2I, H],
// stage 2: W2 as [E * H, I], both row-major, one box tile_n rows by one
// 128-byte k-tile in the 128-byte swizzle), then the layer's MoeArgs. The
// kernel takes it as FT_GRID_CONSTANT, so the TMA unit reads the map where the
// launch put it; the host encodes the map on every launch from the weights'
// address (layer/execute.cpp). A device struct shared with the host;
// append-only. Needs ft/tensor_map.hpp and ft/moe_args.hpp first.
namespace ft {

struct MappedMoeArgs {
  TensorMap weights;  // 128 bytes, 64-byte aligned
  MoeArgs moe;
};

}  // namespace ft
