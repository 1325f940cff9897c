#pragma once
// What the backward's wgmma GEMMs (moe_kgrouped_wgmma.hpp, moe_dgrad_wgmma.hpp)
// share: operands the kernel copies itself, 16-byte cp.async chunks straight
// into the layouts wgmma reads, in the forward's shared ring (wgmma_gemm.hpp,
// run_together: stages - 1 k-slices in flight, two block barriers per slice),
// and the instructions over a stage. A stage holds A's tile_m x tile_k, then
// B's tile_n x tile_k:
//   A MN-major (AMn, the K-grouped GEMM: its rows run along M) or K-major (the
//     dgrad GEMMs: gathered rows along k, tile_k = 64, one 128-byte swizzled
//     row per tile row, as the forward's);
//   B MN-major (both: the rows run along N).
// MN-major: 64-wide M/N blocks of tile_k / 8 groups of eight 128-byte k rows
// (atom_wgmma.hpp: swizzle128_mn_offset, wgmma_descriptor_mn with lbo =
// tile_k / 8 x 1024 and sbo = 1024), read with the transpose immediate set.
// Consumer warpgroups stacked along M; every thread copies.
#include "ft/atom_wgmma.hpp"

namespace ft {

#if defined(FT_FLAVOUR_CUDA) || defined(FT_FLAVOUR_EMU)
template <class Cfg, bool AMn>
struct WgmmaStaged {
  using Atom = typename Cfg::Atom;
  static constexpr int TM = Cfg::tile_m, TN = Cfg::tile_n, TK = Cfg::tile_k, kStages = Cfg::stages;
  static constexpr int kConsumers = Cfg::warps_m * Cfg::warps_n / 4;
  static constexpr int kThreads = kConsumers * 128;
  static constexpr int kGroupRows = TM / kConsumers;  // rows of C each warpgroup owns
  static constexpr int RM = kGroupRows / 64;          // 64-row wgmma blocks per warpgroup
  static constexpr u32 kLbo = TK / 8 * 1024;          // MN-major: one 64-wide block to the next
  static constexpr u32 kSbo = 1024;                   // MN-major: one 8-deep k group to the next
  static constexpr int kABytes = TM * TK * 2, kStageBytes = (TM + TN) * TK * 2;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + room to align the ring to 1024

  static_assert(Atom::kWarpgroup && sizeof(typename Atom::storage) == 2, "a 16-bit wgmma atom");
  static_assert(Cfg::warps_n == 1 && Cfg::warps_m % 4 == 0, "whole warpgroups stacked along M");
  static_assert(kGroupRows % 64 == 0, "each warpgroup owns whole 64-row wgmma blocks");
  static_assert(TN == 64 || TN == 128 || TN == 256, "one wgmma covers the tile's N: 64, 128 or 256");
  static_assert(TK % 16 == 0, "k-slices of whole k16 instructions");
  static_assert(AMn || TK == 64, "a K-major A: one 128-byte swizzled row of 64 values per tile row");
  static_assert(kStages >= 3, "at least two k-slices in flight");

  // The epilogues' staged C tile (moe_kgrouped_wgmma.hpp, moe_dgrad_wgmma.hpp): TM rows of TN + kPad
  // floats from the window's start (the ring, no longer read); the pad puts a half-warp's 8-byte
  // writes of four rows in distinct banks (generator/backward_gemm.cpp's lds_bytes says the same).
  static constexpr int kPad = 8, kCStride = TN + kPad, kCBytes = TM * kCStride * 4;

  float acc[RM][TN / 2];

  // The 1024-aligned ring in the block's shared window.
  FT_DEVICE static unsigned char* ring() {
    unsigned char* window = shared_memory();
    const u32 window_addr = shared_address(window);
    return window + (((window_addr + 1023u) & ~1023u) - window_addr);
  }
  // Byte offsets in a stage of A's element (m, k) and B's (n, k).
  FT_DEVICE static u32 a_offset(int m, int k) { return AMn ? swizzle128_mn_offset(m, k, TK) : swizzle128_offset(m, k); }
  FT_DEVICE static u32 b_offset(int n, int k) { return u32(kABytes) + swizzle128_mn_offset(n, k, TK); }

  // This warpgroup's first row of the tile, and accumulator i's row and column in it.
  FT_DEVICE static int group_row0() { return thread_index() / 128 * kGroupRows; }
  FT_DEVICE static int acc_row(int rm, int i) { return group_row0() + rm * 64 + wgmma_acc_row(thread_index() % 128, i); }
  FT_DEVICE static int acc_col(int i) { return wgmma_acc_col(thread_index() % 128, i); }

  FT_DEVICE void zero() {
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int i = 0; i < TN / 2; ++i) acc[rm][i] = 0.0f;
  }

  // One k-slice's wgmma for this warpgroup from the stage at shared address `stage`.
  FT_DEVICE void mma_slice(u32 stage) {
    wgmma_fence();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
    FT_UNROLL for (int kk = 0; kk < TK / 16; ++kk)
      FT_UNROLL for (int rm = 0; rm < RM; ++rm) {
        const int row = group_row0() + rm * 64;
        const u64 a = AMn ? wgmma_descriptor_mn(stage + u32(row / 64) * kLbo + u32(2 * kk) * kSbo, kLbo, kSbo)
                          : wgmma_descriptor(stage + u32(row * 128 + kk * 32));
        const u64 b = wgmma_descriptor_mn(stage + u32(kABytes) + u32(2 * kk) * kSbo, kLbo, kSbo);
        Atom::template mma_mn<TN, AMn, true>(acc[rm], a, b);
      }
    wgmma_commit();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
  }

  // The accumulators into the staged C tile (row-major, rows kCStride floats
  // apart) once every warpgroup's wgmma have read the ring; the tile is the
  // block's to read after the returning barrier.
  FT_DEVICE float* stage_tile() const {
    float* staged = reinterpret_cast<float*>(shared_memory());
    barrier();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int i = 0; i < TN / 2; i += 2) {  // columns i and i + 1 of a row are neighbours
        alignas(8) const float two[2] = {acc[rm][i], acc[rm][i + 1]};
        FT_MEMCPY_ALIGNED(staged + acc_row(rm, i) * kCStride + acc_col(i), two, 8);
      }
    barrier();
    return staged;
  }

  // acc += the product over k-slices 0 .. slices - 1 (at least one):
  // load(stage, t) issues this thread's copies of slice t into `stage`;
  // landed(stage, t) runs once they have landed, before the block barrier
  // (a kernel's in-place touch-up of its own chunks).
  template <class Load, class Landed>
  FT_DEVICE void accumulate(int slices, Load load, Landed landed) {
    unsigned char* r = ring();
    const u32 ring_addr = shared_address(r);
    if (slices < 1) __builtin_unreachable();  // keeps ptxas from serialising the wgmma (wgmma_gemm.hpp)
    FT_UNROLL for (int s = 0; s < kStages - 1; ++s) {
      if (s < slices) load(r + s * kStageBytes, s);
      copy_async_commit();  // empty groups keep the count uniform
    }
    for (int t = 0; t < slices; ++t) {
      unsigned char* stage = r + (t % kStages) * kStageBytes;
      copy_async_wait<kStages - 2>();  // this thread's copies of slice t have landed
      landed(stage, t);
      fence_async_proxy();
      barrier();  // everyone's have
      mma_slice(ring_addr + u32((t % kStages) * kStageBytes));
      wgmma_wait<1>();  // this warpgroup's slice t - 1 wgmma are done
      barrier();        // every warpgroup's: slice t - 1's buffer takes the next copies
      const int next = t + kStages - 1;
      if (next < slices) load(r + (next % kStages) * kStageBytes, next);
      copy_async_commit();
    }
    wgmma_wait<0>();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
  }
};
#endif

}  // namespace ft
