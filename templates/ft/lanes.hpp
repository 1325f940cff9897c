#pragma once
// Which lanes of a block run a copy of a stage's tile code (tile_order.hpp's
// run_tiles passes one of these to the tile function, which hands it to the
// Gemm's run and holds_tile).
//
// A persistent block with a producer warpgroup (WgmmaGemm with
// warp_specialized and tiles_per_block > 1) splits its lanes once, before
// its first tile: the producer warpgroup's pass over the tiles is compiled
// with ProducerLanes and the consumers' with ConsumerLanes, so each copy
// holds only its own role's instructions (the producer's no wgmma and no
// epilogue, the consumers' no copies). ptxas then sees two disjoint regions,
// which is what lets a setmaxnreg count apply to each (a region that another
// role's code can reach is allocated at the kernel's entry count).
// AllLanes: every lane runs one copy and asks its role at run time (one-tile
// blocks, blocks without a producer, the portable TiledGemm).
namespace ft {

struct AllLanes {
  static constexpr bool produces = true, consumes = true;
};
struct ProducerLanes {
  static constexpr bool produces = true, consumes = false;
};
struct ConsumerLanes {
  static constexpr bool produces = false, consumes = true;
};

}  // namespace ft
