#pragma once
// The K-grouped GEMM of the backward's weight gradients on Hopper warpgroups
// (the wgmma form of moe_kgrouped.hpp, the same arguments and result):
//   C_e = A_e^T B_e over expert e's ragged rows (sorted ids), C [E, m, n] in
//   fp32 (c) or the 16-bit element type (c16; KGroupedArgs).
// Both operands arrive as rows along M (A) and N (B), one row per reduction
// index, so they go to shared memory as they are -- 16-byte cp.async chunks,
// no transpose -- MN-major, and the wgmma read them with both transpose
// immediates set (wgmma_staged.hpp: the layouts, the ring, the instructions).
// A's rows scaled by the routed weight (dW2) are scaled in shared memory by
// the thread that copied them, once its copies have landed.
//
// The epilogue goes through shared memory (WgmmaStaged::stage_tile): the
// accumulators land in a row-major fp32 tile whose rows are padded by kPad
// floats (a half-warp's 8-byte writes of four rows fall in distinct banks),
// then every thread stores whole 16-byte chunks of C's rows, so a warp writes
// 512 contiguous bytes instead of 32 bytes in each of eight rows (the direct
// stores measured at a quarter of DRAM bandwidth, docs/HOPPER.md): 4 fp32
// values a chunk, or, into c16, 8 values rounded to the 16-bit type.
//
// Grid: (m / tile_m, n / tile_n, E). Rows past the expert's end and padding
// rows are zeros (cp.async with no source bytes); an expert without rows
// writes zeros.
#include "ft/moe_kgrouped.hpp"
#include "ft/wgmma_staged.hpp"

namespace ft {

#if defined(FT_FLAVOUR_CUDA) || defined(FT_FLAVOUR_EMU)
template <class Cfg>
struct KGroupedWgmma : WgmmaStaged<Cfg, true> {
  using G = WgmmaStaged<Cfg, true>;
  using S = u16;
  using G::TM, G::TN, G::TK, G::RM, G::kThreads;
  static constexpr int kAChunksPerRow = TM / 8, kChunksPerRow = (TM + TN) / 8;  // a k row: A's chunks, then B's
  static constexpr int kChunksPerThread = TK * kChunksPerRow / kThreads;
  static_assert(TK * kChunksPerRow % kThreads == 0, "every thread copies the same number of chunks");
  using G::kCStride, G::kCBytes;
  static constexpr int kSmemBytes = G::kSmemBytes > kCBytes ? G::kSmemBytes : kCBytes;
  static constexpr int kCChunksPerThread = TM * TN / 4 / kThreads;
  static_assert(TM * TN / 4 % kThreads == 0, "every thread stores the same number of C's 16-byte chunks");
  // 16-bit C (c16): 8 values a chunk, TM * TN / 8 chunks (the last round guarded where kThreads does not divide them).
  static constexpr int kC16Chunks = TM * TN / 8, kC16ChunksPerThread = (kC16Chunks + kThreads - 1) / kThreads;
  static_assert(TN % 8 == 0, "a 16-bit chunk is 8 values of one row");

  // This thread's chunk j of a k-slice: its row r of the slice, whether it is A's, its 16-byte column chunk.
  struct Chunk {
    int r, col;
    bool is_a;
  };
  FT_DEVICE static Chunk chunk_of(int j) {
    const int c = thread_index() + j * kThreads;
    const int r = c / kChunksPerRow, cc = c % kChunksPerRow;
    return cc < kAChunksPerRow ? Chunk{r, cc, true} : Chunk{r, cc - kAChunksPerRow, false};
  }
  FT_DEVICE static u32 offset_of(const Chunk& ch) { return ch.is_a ? G::a_offset(ch.col * 8, ch.r) : G::b_offset(ch.col * 8, ch.r); }
  // The pair of sorted row `row`, or p.pairs past the expert's end.
  FT_DEVICE static int pair_at(const KGroupedArgs& p, int row, int end) { return row < end ? p.sorted_ids[row] : p.pairs; }

  FT_DEVICE static void load(const KGroupedArgs& p, unsigned char* stage, int k0, int end, int m0, int n0) {
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const Chunk ch = chunk_of(j);
      const int id = pair_at(p, k0 + ch.r, end);
      const bool valid = id < p.pairs;
      const long long src_row = (ch.is_a ? p.a_per_token : p.b_per_token) ? id / p.topk : id;
      const u16* src = ch.is_a ? p.a + src_row * p.m + m0 + ch.col * 8 : p.b + src_row * p.n + n0 + ch.col * 8;
      copy_async_16(stage + offset_of(ch), valid ? src : p.a, valid);
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
      FT_MEMCPY(v, stage + offset_of(ch), 16);
      FT_UNROLL for (int i = 0; i < 4; ++i) {
        const u32 lo = from_f32<Cfg::elem>(to_f32<Cfg::elem>(S(v[i] & 0xffffu)) * w);
        const u32 hi = from_f32<Cfg::elem>(to_f32<Cfg::elem>(S(v[i] >> 16)) * w);
        v[i] = lo | hi << 16;
      }
      FT_MEMCPY(stage + offset_of(ch), v, 16);
    }
  }

  FT_DEVICE static void run(const KGroupedArgs& p) {
    const int m0 = block_index_x() * TM, n0 = block_index_y() * TN, e = block_index_z();
    const KGroupedRows rows = kgrouped_rows<kThreads>(p, e);
    KGroupedWgmma g;
    g.zero();
    if (rows.begin < rows.end)  // uniform across the block
      g.accumulate(
          (rows.end - rows.begin + TK - 1) / TK, [&](unsigned char* stage, int t) { load(p, stage, rows.begin + t * TK, rows.end, m0, n0); },
          [&](unsigned char* stage, int t) {
            if (p.a_scales) scale(p, stage, rows.begin + t * TK, rows.end);
          });
    g.store(p, e, m0, n0);
  }

  // C's tile from the accumulators, through shared memory (the header).
  FT_DEVICE void store(const KGroupedArgs& p, int e, int m0, int n0) const {
    const float* staged = this->stage_tile();
    const long long M = p.m, N = p.n;
    if (p.c16) {  // uniform across the grid
      FT_UNROLL for (int j = 0; j < kC16ChunksPerThread; ++j) {
        const int c = thread_index() + j * kThreads;
        if (kC16Chunks % kThreads != 0 && c >= kC16Chunks) continue;
        const int r = c / (TN / 8), col = c % (TN / 8) * 8;
        alignas(16) float v[8];
        FT_MEMCPY_ALIGNED(v, staged + r * kCStride + col, 16);
        FT_MEMCPY_ALIGNED(v + 4, staged + r * kCStride + col + 4, 16);
        alignas(16) u16 h[8];
        FT_UNROLL for (int i = 0; i < 8; ++i) h[i] = from_f32<Cfg::elem>(v[i]);
        FT_MEMCPY_ALIGNED(p.c16 + ((long long)e * M + m0 + r) * N + n0 + col, h, 16);
      }
      return;
    }
    FT_UNROLL for (int j = 0; j < kCChunksPerThread; ++j) {
      const int c = thread_index() + j * kThreads;
      const int r = c / (TN / 4), col = c % (TN / 4) * 4;
      FT_MEMCPY_ALIGNED(p.c + ((long long)e * M + m0 + r) * N + n0 + col, staged + r * kCStride + col, 16);
    }
  }
};
#endif

}  // namespace ft
