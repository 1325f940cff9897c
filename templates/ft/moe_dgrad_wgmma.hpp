#pragma once
// The backward's routed dgrad GEMMs on Hopper warpgroups (the wgmma form of
// moe_dgrad.hpp, the same arguments, epilogues and results):
//   C[p, n] = sum_k A[row(p), k] W_e[k, n]   over the forward's sorted rows
// A's gathered rows run along k: K-major, one 128-byte swizzled row of 64
// values per tile row, as the forward's stages read theirs; the weight's rows
// run along n: MN-major, read with the transpose immediate set (no transposed
// copy of the weights, no transposed LDS stores). Both come by 16-byte
// cp.async chunks (wgmma_staged.hpp: the layouts, the ring, the instructions).
// Epilogues as the portable form's: swiglu (dgate, dup into d_gate_up, C h_p
// summed into d(topk_weights)) or scatter (fp32 atomics into dx[p / k]).
// The swiglu epilogue goes through shared memory (the ring, no longer read):
// the fp32 C tile lands row-major, rows padded by kPad floats (WgmmaStaged::stage_tile, as
// moe_kgrouped_wgmma.hpp's), then each thread takes eight neighbouring columns
// of a row -- one 16-byte load of g and of u, one 16-byte store of dgate and of
// dup, where the accumulator layout gave 2-byte accesses spread over eight rows
// -- and leaves its share of d(topk_weights) in the tile; one thread per row
// sums the row's shares into one atomic.
//
// Grid: (max_padded_rows / tile_m, n / tile_n); row blocks past the padded
// rows return; a tile never straddles two experts (the program's align block
// is a multiple of tile_m).
#include "ft/moe_dgrad.hpp"
#include "ft/wgmma_staged.hpp"

namespace ft {

#if defined(FT_FLAVOUR_CUDA) || defined(FT_FLAVOUR_EMU)
template <class Cfg>
struct RoutedDgradWgmma : WgmmaStaged<Cfg, false> {
  using G = WgmmaStaged<Cfg, false>;
  using G::TM, G::TN, G::TK, G::RM, G::kThreads;
  static constexpr int kAChunks = TM * TK / 8, kChunks = kAChunks + TK * TN / 8;  // A's rows, then W's k rows
  static constexpr int kChunksPerThread = kChunks / kThreads;
  static_assert(kChunks % kThreads == 0, "every thread copies the same number of chunks");
  static constexpr bool kStaged = Cfg::epilogue == DgradEpilogue::swiglu;
  using G::kCStride, G::kCBytes;
  static constexpr int kSmemBytes = kStaged && kCBytes > G::kSmemBytes ? kCBytes : G::kSmemBytes;
  static constexpr int kRowThreads = TN / 8, kRowsPerPass = kThreads / kRowThreads;  // eight columns a thread
  static_assert(kThreads % kRowThreads == 0 && TM % kRowsPerPass == 0, "whole rows per pass, whole passes per tile");

  FT_DEVICE static void load(const DgradArgs& p, const i32* ids, int expert, unsigned char* stage, int k0, int n0) {
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = thread_index() + j * kThreads;
      if (c < kAChunks) {
        const int r = c / (TK / 8), col = (c % (TK / 8)) * 8;
        const int id = ids[r];
        const bool valid = id < p.pairs;  // else a padding row: zeros
        const long long row = p.a_per_token ? id / p.topk : id;
        copy_async_16(stage + G::a_offset(r, col), valid ? p.a + row * p.k + k0 + col : p.a, valid);
      } else {
        const int cc = c - kAChunks, kr = cc / (TN / 8), col = (cc % (TN / 8)) * 8;
        const u16* src = p.w + ((long long)expert * p.k + k0 + kr) * p.n + n0 + col;
        copy_async_16(stage + G::b_offset(col, kr), src, true);
      }
    }
  }

  FT_DEVICE static void run(const DgradArgs& p) {
    DgradTile tile;
    if (!dgrad_tile(p, TM, TN, tile)) return;
    const int expert = tile.expert, n0 = tile.n0;
    const i32* ids = tile.ids;
    RoutedDgradWgmma g;
    g.zero();
    if (p.k >= TK)  // uniform across the block
      g.accumulate(
          p.k / TK, [&](unsigned char* stage, int t) { load(p, ids, expert, stage, t * TK, n0); }, [](unsigned char*, int) {});
    if constexpr (kStaged) {
      g.swiglu_epilogue(p, ids, n0);
      return;
    }
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int half = 0; half < 2; ++half) {  // the lane's two rows of each 64-row block
        const int id = ids[G::acc_row(rm, 2 * half)];
        if (id >= p.pairs) continue;
        FT_UNROLL for (int i = 2 * half; i < TN / 2; i += 4)
          FT_UNROLL for (int j = 0; j < 2; ++j)  // columns i + j of this row
            atomic_add(&p.dx[(long long)(id / p.topk) * p.n + n0 + G::acc_col(i + j)], g.acc[rm][i + j]);
      }
  }

  // The swiglu epilogue through shared memory (the header).
  FT_DEVICE void swiglu_epilogue(const DgradArgs& p, const i32* ids, int n0) const {
    float* staged = this->stage_tile();
    const int t = thread_index(), col = t % kRowThreads * 8;
    FT_UNROLL for (int pass = 0; pass < TM / kRowsPerPass; ++pass) {
      const int r = pass * kRowsPerPass + t / kRowThreads, id = ids[r];
      float* at = staged + r * kCStride + col;
      alignas(16) float c[8];
      FT_MEMCPY_ALIGNED(c, at, 16);
      FT_MEMCPY_ALIGNED(c + 4, at + 4, 16);
      at[0] = id < p.pairs ? dgrad_swiglu_backward8<Cfg::elem>(p, id, n0 + col, c) : 0.0f;  // this thread's share
    }
    barrier();
    for (int r = t; r < TM; r += kThreads) {
      const int id = ids[r];
      if (id >= p.pairs) continue;
      float dw = 0.0f;
      FT_UNROLL for (int j = 0; j < kRowThreads; ++j) dw += staged[r * kCStride + j * 8];
      atomic_add(&p.d_weights[id], dw);
    }
  }
};
#endif

}  // namespace ft
