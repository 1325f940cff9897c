#pragma once
#include "ft/staged_gemm.hpp"
// The backward's routed dgrad GEMMs (docs/TRAINING.md). Over the forward's
// sorted rows, like the forward stages (a row block belongs to one expert e):
//   C[p, n] = sum_k A[row(p), k] W_e[k, n]      W_e [K, n] row-major: the weight read transposed
// and an epilogue (Cfg::epilogue, DgradEpilogue in moe_backward_args.hpp):
//   swiglu (stage-2 backward; A = dY, a token's row; W = W2 [E, H, I]):
//     dh = w_p C; from the saved pre-activations g, u: dg = dh u silu'(g), du = dh silu(g)
//     into d_gate_up [T*k, 2I]; C . h_p (h_p = silu(g) u) added into d_weights[p]
//   scatter (stage-1 backward; A = dH [T*k, 2I]; W = W1 [E, 2I, H]):
//     C added into dx[p / k] (fp32 atomics: the scatter-add over the top-k slots)
// Grid: (max_padded_rows / tile_m, n / tile_n); row blocks past the padded rows
// return. A's rows are staged as in the forward (16-byte chunks along k); the
// weight's k-rows are read as chunks along n and stored transposed into the
// tiled machinery's LDS layout (as moe_kgrouped.hpp's operands), so
// TiledGemm::compute runs the atoms (staged_gemm.hpp: the main loop). The portable form.
namespace ft {

// One column's SwiGLU backward from C, the row's scale and the saved g, u:
// dgate and dup, and the column's share of d(topk_weights), C h_p.
struct SwigluGrad {
  float dgate, dup, dw;
};
FT_DEVICE SwigluGrad swiglu_grad(float c, float scale, float g, float u) {
  const float s = 1.0f / (1.0f + exp_f32(-g));
  const float dh = c * scale;
  return {dh * u * s * (1.0f + g * (1.0f - s)), dh * g * s, c * g * s * u};  // dw_p = dY_t . W2_e h_p = sum of C h_p
}

// The SwiGLU backward of pair `id` at column `col` from C = (W2_e^T dY_t)[col]
// (the portable form's epilogue): dgate and dup into d_gate_up; returns the
// column's share of d(topk_weights)[id], C h_p.
template <Elem E>
FT_DEVICE float dgrad_swiglu_backward(const DgradArgs& p, int id, long long col, float c) {
  const long long I = p.n;
  const long long at = (long long)id * 2 * I + col;
  const SwigluGrad d = swiglu_grad(c, p.row_scales ? p.row_scales[id] : 1.0f, to_f32<E>(p.gate_up[at]), to_f32<E>(p.gate_up[at + I]));
  p.d_gate_up[at] = from_f32<E>(d.dgate);
  p.d_gate_up[at + I] = from_f32<E>(d.dup);
  return d.dw;
}

// The same for eight neighbouring columns col .. col + 7 (col a multiple of 8):
// one 16-byte load of the gate and one of the up pre-activations, one 16-byte
// store of each gradient (moe_dgrad_wgmma.hpp's staged epilogue); returns the
// eight columns' share of d(topk_weights)[id].
template <Elem E>
FT_DEVICE float dgrad_swiglu_backward8(const DgradArgs& p, int id, long long col, const float (&c)[8]) {
  const long long I = p.n;
  const long long at = (long long)id * 2 * I + col;
  alignas(16) u16 gate[8], up[8], dgate[8], dup[8];
  FT_MEMCPY_ALIGNED(gate, p.gate_up + at, 16);
  FT_MEMCPY_ALIGNED(up, p.gate_up + at + I, 16);
  const float scale = p.row_scales ? p.row_scales[id] : 1.0f;
  float dw = 0.0f;
  FT_UNROLL for (int j = 0; j < 8; ++j) {
    const SwigluGrad d = swiglu_grad(c[j], scale, to_f32<E>(gate[j]), to_f32<E>(up[j]));
    dgate[j] = from_f32<E>(d.dgate);
    dup[j] = from_f32<E>(d.dup);
    dw += d.dw;
  }
  FT_MEMCPY_ALIGNED(p.d_gate_up + at, dgate, 16);
  FT_MEMCPY_ALIGNED(p.d_gate_up + at + I, dup, 16);
  return dw;
}

// A block's tile of C (both forms): its first sorted row, its expert (a row
// block never straddles two: the align block is a multiple of tile_m), its
// first column and its rows' pair ids; false past the padded rows (uniform
// across the block: it returns).
struct DgradTile {
  int row0, expert, n0;
  const i32* ids;
};
FT_DEVICE bool dgrad_tile(const DgradArgs& p, int tile_m, int tile_n, DgradTile& t) {
  t.row0 = block_index_x() * tile_m;
  if (t.row0 >= *p.padded_rows) return false;
  t.expert = p.block_experts[t.row0 / p.align_block];
  t.n0 = block_index_y() * tile_n;
  t.ids = p.sorted_ids + t.row0;
  return true;
}

template <class Cfg>
struct RoutedDgrad : StagedGemm<Cfg> {
  FT_STAGED_GEMM_NAMES;

  FT_DEVICE void fetch(const DgradArgs& p, const i32* ids, int expert, int k0, int n0) {
    const int tid = thread_index();
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = tid + j * kThreads;
      FT_UNROLL for (int i = 0; i < 4; ++i) staged[j][i] = 0u;
      if (c >= kChunks) continue;
      const u16* src = nullptr;
      if (c < kAChunks) {
        const int id = ids[c / (TK / kChunkElems)];
        if (id >= p.pairs) continue;  // a padding row
        const long long row = p.a_per_token ? id / p.topk : id;
        src = p.a + row * p.k + k0 + (c % (TK / kChunkElems)) * kChunkElems;
      } else {
        const int cc = c - kAChunks;
        const long long krow = (long long)expert * p.k + k0 + cc / (TN / kChunkElems);
        src = p.w + krow * p.n + n0 + (cc % (TN / kChunkElems)) * kChunkElems;
      }
      const Chunk16 v = *reinterpret_cast<const Chunk16*>(src);  // 16-byte aligned: k, n multiples of 8
      FT_MEMCPY(staged[j], &v, 16);
    }
  }

  // A's chunks as they are (LDS row r, k contiguous); W's transposed (its column n is LDS row TM + n).
  FT_DEVICE void store(S* buf) {
    const int tid = thread_index();
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = tid + j * kThreads;
      if (c >= kChunks) continue;
      if (c < kAChunks) {
        S* dst = buf + (c / (TK / kChunkElems)) * Core::kRowElems + (c % (TK / kChunkElems)) * kChunkElems;
        FT_UNROLL for (int i = 0; i < kChunkElems; ++i) dst[i] = half_of(staged[j][i / 2], i);
      } else {
        const int cc = c - kAChunks;
        const int r = cc / (TN / kChunkElems), col = TM + (cc % (TN / kChunkElems)) * kChunkElems;
        FT_UNROLL for (int i = 0; i < kChunkElems; ++i) buf[(col + i) * Core::kRowElems + r] = half_of(staged[j][i / 2], i);
      }
    }
  }

  FT_DEVICE static void run(const DgradArgs& p) {
    DgradTile tile;
    if (!dgrad_tile(p, TM, TN, tile)) return;
    const int expert = tile.expert, n0 = tile.n0;
    const i32* ids = tile.ids;
    RoutedDgrad g;
    g.accumulate(0, p.k, [&](int k0) { g.fetch(p, ids, expert, k0, n0); }, [&](S* buf) { g.store(buf); });
    FT_UNROLL for (int rm = 0; rm < Core::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Core::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Core::kCRegs; ++i) {
          const int id = ids[Core::acc_row(rm, i)];
          if (id >= p.pairs) continue;
          const long long col = n0 + Core::acc_col(rn, i);
          const float c = g.core.acc[0][rm][rn][i];
          if constexpr (Cfg::epilogue == DgradEpilogue::swiglu) atomic_add(&p.d_weights[id], dgrad_swiglu_backward<Cfg::elem>(p, id, col, c));
          else atomic_add(&p.dx[(long long)(id / p.topk) * p.n + col], c);
        }
  }
};

}  // namespace ft
