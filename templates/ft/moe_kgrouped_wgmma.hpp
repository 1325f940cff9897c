#pragma once
// The K-grouped GEMM of the backward's weight gradients on Hopper warpgroups
// (the wgmma form of moe_kgrouped.hpp, the same arguments and result):
//   C_e = A_e^T B_e over expert e's ragged rows (sorted ids), C fp32 [E, m, n].
// Both operands arrive as rows along M (A) and N (B), one row per reduction
// index, so they go to shared memory as they are -- 16-byte cp.async chunks,
// no transpose -- in the MN-major 128-byte swizzled layout, and the wgmma
// read them with the transpose immediates set (atom_wgmma.hpp,
// wgmma_descriptor_mn). A k-slice of tile_k rows of a stage holds A's tile_m
// columns, then B's tile_n: per operand, 64-wide M/N blocks of tile_k / 8
// groups of 8 k rows of 128 bytes (lbo = tile_k / 8 * 1024, sbo = 1024).
// The ring is the forward's shared cp.async ring (wgmma_gemm.hpp,
// run_together): loads run stages - 1 k-slices ahead, two block barriers per
// k-slice. A's rows scaled by the routed weight (dW2) are scaled in shared
// memory by the thread that copied them, once its copies have landed.
//
// Grid: (m / tile_m, n / tile_n, E); consumer warpgroups stacked along M (each
// tile_m / warpgroups rows), every thread copies. Rows past the expert's end
// and padding rows are zeros (cp.async with no source bytes).
#include "ft/moe_kgrouped.hpp"

namespace ft {

#if defined(FT_FLAVOUR_CUDA) || defined(FT_FLAVOUR_EMU)
template <class Cfg>
struct KGroupedWgmma {
  using Atom = typename Cfg::Atom;
  using S = u16;
  static constexpr int TM = Cfg::tile_m, TN = Cfg::tile_n, TK = Cfg::tile_k, kStages = Cfg::stages;
  static constexpr int kConsumers = Cfg::warps_m * Cfg::warps_n / 4;
  static constexpr int kThreads = kConsumers * 128;
  static constexpr int kGroupRows = TM / kConsumers;  // rows of C each warpgroup owns
  static constexpr int RM = kGroupRows / 64;          // 64-row wgmma blocks per warpgroup
  static constexpr u32 kLbo = TK / 8 * 1024;          // one 64-wide M/N block to the next
  static constexpr u32 kSbo = 1024;                   // one 8-deep k group to the next
  static constexpr int kABytes = TM * TK * 2, kStageBytes = (TM + TN) * TK * 2;
  static constexpr int kSmemBytes = kStages * kStageBytes + 1024;  // + room to align the ring to 1024
  static constexpr int kAChunksPerRow = TM / 8, kChunksPerRow = (TM + TN) / 8;
  static constexpr int kChunksPerThread = TK * kChunksPerRow / kThreads;

  static_assert(Atom::kWarpgroup && sizeof(typename Atom::storage) == 2, "a 16-bit wgmma atom");
  static_assert(Cfg::warps_n == 1 && Cfg::warps_m % 4 == 0, "whole warpgroups stacked along M");
  static_assert(kGroupRows % 64 == 0, "each warpgroup owns whole 64-row wgmma blocks");
  static_assert(TN == 64 || TN == 128 || TN == 256, "one wgmma covers the tile's N: 64, 128 or 256");
  static_assert(TK % 16 == 0, "k-slices of whole k16 instructions");
  static_assert(TK * kChunksPerRow % kThreads == 0, "every thread copies the same number of chunks");
  static_assert(kStages >= 3, "at least two k-slices in flight");

  float acc[RM][TN / 2];

  // The 1024-aligned ring in the block's shared window.
  FT_DEVICE static unsigned char* ring() {
    unsigned char* window = shared_memory();
    const u32 window_addr = shared_address(window);
    return window + (((window_addr + 1023u) & ~1023u) - window_addr);
  }

  // Where this thread's chunk j of a k-slice comes from and goes: its row r
  // of the slice, whether it is A's, and its 16-byte column chunk.
  struct Chunk {
    int r, col;
    bool is_a;
  };
  FT_DEVICE static Chunk chunk_of(int j) {
    const int c = thread_index() + j * kThreads;
    const int r = c / kChunksPerRow, cc = c % kChunksPerRow;
    return cc < kAChunksPerRow ? Chunk{r, cc, true} : Chunk{r, cc - kAChunksPerRow, false};
  }
  FT_DEVICE static u32 stage_offset(const Chunk& ch) {
    return (ch.is_a ? 0u : u32(kABytes)) + swizzle128_mn_offset(ch.col * 8, ch.r, TK);
  }
  // The pair whose row is row `k0 + r` of the expert's rows, or p.pairs.
  FT_DEVICE static int pair_at(const KGroupedArgs& p, int row, int end) { return row < end ? p.sorted_ids[row] : p.pairs; }

  FT_DEVICE static void load(const KGroupedArgs& p, unsigned char* stage, int k0, int end, int m0, int n0) {
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const Chunk ch = chunk_of(j);
      const int id = pair_at(p, k0 + ch.r, end);
      const bool valid = id < p.pairs;
      const long long src_row = (ch.is_a ? p.a_per_token : p.b_per_token) ? id / p.topk : id;
      const u16* src = ch.is_a ? p.a + src_row * p.m + m0 + ch.col * 8 : p.b + src_row * p.n + n0 + ch.col * 8;
      copy_async_16(stage + stage_offset(ch), valid ? src : p.a, valid);
    }
  }

  // A's rows times their pair's routed weight (p.a_scales), for the chunks this
  // thread copied into `stage` (they have landed).
  FT_DEVICE static void scale(const KGroupedArgs& p, unsigned char* stage, int k0, int end) {
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const Chunk ch = chunk_of(j);
      if (!ch.is_a) continue;
      const int id = pair_at(p, k0 + ch.r, end);
      if (id >= p.pairs) continue;
      const float w = p.a_scales[id];
      u32 v[4];
      FT_MEMCPY(v, stage + stage_offset(ch), 16);
      FT_UNROLL for (int i = 0; i < 4; ++i) {
        const u32 lo = from_f32<Cfg::elem>(to_f32<Cfg::elem>(S(v[i] & 0xffffu)) * w);
        const u32 hi = from_f32<Cfg::elem>(to_f32<Cfg::elem>(S(v[i] >> 16)) * w);
        v[i] = lo | hi << 16;
      }
      FT_MEMCPY(stage + stage_offset(ch), v, 16);
    }
  }

  // One k-slice's wgmma for this warpgroup from the stage at shared address `stage`.
  FT_DEVICE void mma_slice(u32 stage) {
    const int block0 = thread_index() / 128 * kGroupRows / 64;  // the warpgroup's first 64-row block of A
    wgmma_fence();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
    FT_UNROLL for (int kk = 0; kk < TK / 16; ++kk)
      FT_UNROLL for (int rm = 0; rm < RM; ++rm) {
        const u32 a = stage + u32(block0 + rm) * kLbo + u32(2 * kk) * kSbo;
        const u32 b = stage + u32(kABytes) + u32(2 * kk) * kSbo;
        Atom::template mma_mn<TN, true, true>(acc[rm], wgmma_descriptor_mn(a, kLbo, kSbo), wgmma_descriptor_mn(b, kLbo, kSbo));
      }
    wgmma_commit();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
  }

  // acc += the sum over the expert's rows [begin, end) (at least one k-slice).
  FT_DEVICE void accumulate(const KGroupedArgs& p, int begin, int end, int m0, int n0) {
    unsigned char* r = ring();
    const u32 ring_addr = shared_address(r);
    const int slices = (end - begin + TK - 1) / TK;
    if (slices < 1) __builtin_unreachable();  // keeps ptxas from serialising the wgmma (wgmma_gemm.hpp)
    FT_UNROLL for (int s = 0; s < kStages - 1; ++s) {
      if (s < slices) load(p, r + s * kStageBytes, begin + s * TK, end, m0, n0);
      copy_async_commit();  // empty groups keep the count uniform
    }
    for (int t = 0; t < slices; ++t) {
      unsigned char* stage = r + (t % kStages) * kStageBytes;
      copy_async_wait<kStages - 2>();  // this thread's copies of slice t have landed
      if (p.a_scales) scale(p, stage, begin + t * TK, end);
      fence_async_proxy();
      barrier();  // everyone's have
      mma_slice(ring_addr + u32((t % kStages) * kStageBytes));
      wgmma_wait<1>();  // this warpgroup's slice t - 1 wgmma are done
      barrier();        // every warpgroup's: slice t - 1's buffer takes the next copies
      const int next = t + kStages - 1;
      if (next < slices) load(p, r + (next % kStages) * kStageBytes, begin + next * TK, end, m0, n0);
      copy_async_commit();
    }
    wgmma_wait<0>();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
  }

  FT_DEVICE static void run(const KGroupedArgs& p) {
    const int m0 = block_index_x() * TM, n0 = block_index_y() * TN, e = block_index_z();
    const KGroupedRows rows = kgrouped_rows(p, e);
    KGroupedWgmma g;
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int i = 0; i < TN / 2; ++i) g.acc[rm][i] = 0.0f;
    if (rows.begin < rows.end) g.accumulate(p, rows.begin, rows.end, m0, n0);  // uniform across the block
    const int t = thread_index() % 128, row0 = thread_index() / 128 * kGroupRows;
    const long long M = p.m, N = p.n;
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int i = 0; i < TN / 2; i += 2) {
        const long long row = m0 + row0 + rm * 64 + wgmma_acc_row(t, i), col = n0 + wgmma_acc_col(t, i);
        float* dst = p.c + ((long long)e * M + row) * N + col;
        dst[0] = g.acc[rm][i];
        dst[1] = g.acc[rm][i + 1];
      }
  }
};
#endif

}  // namespace ft
