#pragma once
// Stage 1: gather X rows by the sorted pair ids, multiply by the expert's gate
// and up rows of W1 (two accumulators sharing each A fragment), apply SwiGLU
// (silu(gate) * up) and optionally the routed weight, write [T*k, I].
// Grid: (max_padded_rows / tile_m, I / tile_n), or a persistent grid walking
// those tiles (tile_order.hpp); tiles past the padded rows are skipped.
namespace ft {

template <class Cfg>
struct Stage1 {
  using Gemm = GemmFor<Cfg, 2>;
  static constexpr int kThreads = Gemm::kThreads;
  static constexpr int kSmemBytes = Gemm::kSmemBytes;

  FT_DEVICE static void run(const MoeArgs& p) {
    Gemm g;
    run_tiles<Cfg>(g, p.max_padded_rows / Cfg::tile_m, p.inter_size / Cfg::tile_n, 1,
                   [&](int row_block, int col_tile, int) { tile(p, g, row_block, col_tile); });
  }

  FT_DEVICE static void tile(const MoeArgs& p, Gemm& g, int row_block, int col_tile) {
    const int row0 = row_block * Cfg::tile_m;
    if (row0 >= *p.padded_rows) return;  // uniform across the block
    const int expert = p.block_experts[row0 / p.align_block];
    const int n0 = col_tile * Cfg::tile_n;
    const int pairs = p.tokens * p.topk;
    const long long H = p.hidden, I = p.inter_size;
    const i32* ids = p.sorted_ids + row0;

    g.setup(
        [&](int r) -> const u16* {
          const int id = ids[r];
          return id < pairs ? p.x + (long long)(id / p.topk) * H : nullptr;
        },
        [&](int nb, int r, int k) -> const u16* {
          const long long row = (long long)expert * 2 * I + nb * I + n0 + r;  // nb 0: gate, 1: up
          return p.w1 + weight_offset<Cfg::layout>(row, k, H, p.experts * 2 * I);
        });
    g.run(0, int(H));

    if (!Gemm::holds_results()) return;  // a producer warpgroup only copied
    constexpr int kStep = Gemm::kPairedColumns ? 2 : 1;  // adjacent columns stored together
    FT_UNROLL for (int rm = 0; rm < Gemm::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Gemm::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Gemm::kCRegs; i += kStep) {
          const int id = ids[Gemm::acc_row(rm, i)];
          if (id >= pairs) continue;
          u16 h[kStep];
          FT_UNROLL for (int s = 0; s < kStep; ++s) {
            const float gate = g.acc_at(0, rm, rn, i + s), up = g.acc_at(1, rm, rn, i + s);
            float v = silu(gate, exp_f32(-gate)) * up;
            if constexpr (Cfg::weight_in_stage1) v *= p.topk_weights[id];
            h[s] = from_f32<Cfg::elem>(v);
          }
          u16* out = p.inter + (long long)id * I + n0 + Gemm::acc_col(rn, i);
          if constexpr (kStep == 2) store_pair(out, h[0], h[1]);
          else *out = h[0];
        }
  }
};

}  // namespace ft
