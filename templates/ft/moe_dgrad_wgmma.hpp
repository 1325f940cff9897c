#pragma once
// The backward's routed dgrad GEMMs on Hopper warpgroups (the wgmma form of
// moe_dgrad.hpp, the same arguments, epilogues and results):
//   C[p, n] = sum_k A[row(p), k] W_e[k, n]   over the forward's sorted rows
// A's gathered rows run along k: K-major, one 128-byte swizzled row of 64
// values per tile row, as the forward's stages read theirs; the weight's rows
// run along n: MN-major, read with the transpose immediate set (no transposed
// copy of the weights, no transposed LDS stores). Both come by 16-byte
// cp.async chunks (wgmma_staged.hpp: the layouts, the ring, the instructions).
// Epilogues as the portable form's: swiglu (dgate, dup into d_gate_up; each
// lane's share of d(topk_weights) summed over its columns before one atomic
// per row) or scatter (fp32 atomics into dx[p / k]).
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
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int half = 0; half < 2; ++half) {  // the lane's two rows of each 64-row block
        const int id = ids[G::acc_row(rm, 2 * half)];
        if (id >= p.pairs) continue;
        float dw = 0.0f;
        FT_UNROLL for (int i = 2 * half; i < TN / 2; i += 4)
          FT_UNROLL for (int j = 0; j < 2; ++j) {  // columns i + j of this row
            const long long col = n0 + G::acc_col(i + j);
            const float c = g.acc[rm][i + j];
            if constexpr (Cfg::epilogue == DgradEpilogue::swiglu) dw += dgrad_swiglu_backward<Cfg::elem>(p, id, col, c);
            else atomic_add(&p.dx[(long long)(id / p.topk) * p.n + col], c);
          }
        if constexpr (Cfg::epilogue == DgradEpilogue::swiglu) atomic_add(&p.d_weights[id], dw);
      }
  }
};
#endif

}  // namespace ft
