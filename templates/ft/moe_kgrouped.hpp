#pragma once
#include "ft/staged_gemm.hpp"
// The K-grouped GEMM of the backward's weight gradients (docs/TRAINING.md):
// for every expert e, C_e = A_e^T B_e, where A_e and B_e are the rows of A and
// B of the pairs routed to e, read through the sorted ids the forward's align
// wrote. Each expert reduces over its own, ragged, number of rows:
//   dW2_e = (w dY)_e^T inter_e   A = dY (a token's row times the pair's routed weight), B = the intermediate
//   dW1_e = dH_e^T X_e           A = dH [T*k, 2I] ([dgate; dup]), B = X (a token's row)
// C is [E, m, n], fp32 (c) or the 16-bit element type (c16, rounded as
// from_f32<elem>; KGroupedArgs); every element is written, zeros for an
// expert without rows.
//
// Grid: (m / tile_m, n / tile_n, E). A block finds its expert's rows in
// block_experts (nondecreasing: align lays the experts out in order), then
// walks them tile_k at a time. Each row's tile_m values of A and tile_n of B
// are read as 16-byte chunks and stored transposed into the tiled machinery's
// LDS layout (tiled_gemm.hpp: one LDS row per output row or column, k
// contiguous), so its compute step runs the atoms exactly as in the forward
// stages (staged_gemm.hpp: the main loop). Rows past the expert's end and padding rows (id = pairs) are zeros.
// The portable form: the transposed store is 2-byte LDS writes.
namespace ft {

// The first and one-past-last row of sorted_ids that belong to expert e
// (both forms of the K-grouped GEMM: this one and moe_kgrouped_wgmma.hpp),
// found by the whole block before its main loop: each of the kThreads threads
// reads every kThreads-th entry of block_experts (nondecreasing: align lays
// the experts out in order) with its predecessor -- independent loads, one
// memory latency -- and the one thread that sees the expert's first (last + 1)
// row block writes it into the window's first two ints. (A binary search was
// two chains of ~log2(row blocks) dependent loads per block, ~20 at
// qwen3-30b's T = 4096, before the block's first operand load.) Every thread
// of the block calls it; the window is the caller's again when it returns.
struct KGroupedRows {
  int begin, end;
};
template <int kThreads>
FT_DEVICE KGroupedRows kgrouped_rows(const KGroupedArgs& p, int e) {
  int* found = reinterpret_cast<int*>(shared_memory());
  const int blocks = *p.padded_rows / p.align_block;
  if (thread_index() == 0) found[0] = found[1] = blocks;  // no block of an expert >= e (> e): all rows before
  barrier();
  for (int j = thread_index(); j < blocks; j += kThreads) {
    const int before = j ? p.block_experts[j - 1] : -1, here = p.block_experts[j];
    if (before < e && here >= e) found[0] = j;
    if (before <= e && here > e) found[1] = j;
  }
  barrier();
  const KGroupedRows rows{found[0] * p.align_block, found[1] * p.align_block};
  barrier();
  return rows;
}

template <class Cfg>
struct KGrouped : StagedGemm<Cfg> {
  FT_STAGED_GEMM_NAMES;

  // Chunk c of the k-slice starting at sorted row `row0`: A's chunks first
  // (row c / (TM/8), columns from m0), then B's (from n0).
  FT_DEVICE void fetch(const KGroupedArgs& p, int row0, int end, int m0, int n0) {
    const int tid = thread_index();
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = tid + j * kThreads;
      FT_UNROLL for (int i = 0; i < 4; ++i) staged[j][i] = 0u;
      if (c >= kChunks) continue;
      const bool is_a = c < kAChunks;
      const int per_row = (is_a ? TM : TN) / kChunkElems, cc = is_a ? c : c - kAChunks;
      const int row = row0 + cc / per_row;
      const int id = row < end ? p.sorted_ids[row] : p.pairs;
      if (id >= p.pairs) continue;  // padding, or past the expert's rows
      const long long src_row = (is_a ? p.a_per_token : p.b_per_token) ? id / p.topk : id;
      const long long width = is_a ? p.m : p.n;
      const u16* src = (is_a ? p.a : p.b) + src_row * width + (is_a ? m0 : n0) + (cc % per_row) * kChunkElems;
      const Chunk16 v = *reinterpret_cast<const Chunk16*>(src);  // one 16-byte load (16-byte aligned: m, n multiples of 8)
      FT_MEMCPY(staged[j], &v, 16);
      if (is_a && p.a_scales) {
        const float w = p.a_scales[id];
        FT_UNROLL for (int i = 0; i < 4; ++i) {
          const u32 lo = from_f32<Cfg::elem>(to_f32<Cfg::elem>(half_of(staged[j][i], 0)) * w);
          const u32 hi = from_f32<Cfg::elem>(to_f32<Cfg::elem>(half_of(staged[j][i], 1)) * w);
          staged[j][i] = lo | hi << 16;
        }
      }
    }
  }

  // The staged chunks transposed into the LDS tile: A's column m is LDS row m,
  // B's column n is LDS row TM + n; the k-slice's row r is column r of both.
  FT_DEVICE void store(S* buf) {
    const int tid = thread_index();
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = tid + j * kThreads;
      if (c >= kChunks) continue;
      const bool is_a = c < kAChunks;
      const int per_row = (is_a ? TM : TN) / kChunkElems, cc = is_a ? c : c - kAChunks;
      const int r = cc / per_row, col = (is_a ? 0 : TM) + (cc % per_row) * kChunkElems;
      FT_UNROLL for (int i = 0; i < kChunkElems; ++i) buf[(col + i) * Core::kRowElems + r] = half_of(staged[j][i / 2], i);
    }
  }

  FT_DEVICE static void run(const KGroupedArgs& p) {
    KGrouped g;
    const int m0 = block_index_x() * TM, n0 = block_index_y() * TN, e = block_index_z();
    const KGroupedRows rows = kgrouped_rows<kThreads>(p, e);
    g.accumulate(rows.begin, rows.end, [&](int k0) { g.fetch(p, k0, rows.end, m0, n0); }, [&](S* buf) { g.store(buf); });
    const long long M = p.m, N = p.n;
    FT_UNROLL for (int rm = 0; rm < Core::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Core::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Core::kCRegs; ++i) {
          const long long at = ((long long)e * M + m0 + Core::acc_row(rm, i)) * N + n0 + Core::acc_col(rn, i);
          const float v = g.core.acc[0][rm][rn][i];
          if (p.c16) p.c16[at] = from_f32<Cfg::elem>(v);
          else p.c[at] = v;
        }
  }
};

}  // namespace ft
