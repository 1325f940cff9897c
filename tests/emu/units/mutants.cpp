// Deliberately broken stage-1 kernels for gfx942 (tests/emu/mutation_test.cpp):
// the emulator must make them fail verification, while the same configuration
// unmutated passes.
#include "ft/kernels.hpp"

namespace {

// Lanes of K-group g load the A operand of K-group g+1 (the instruction keeps
// its true layout: mma's Self is the base atom).
struct broken_a_layout : ft::atom::mfma_f32_16x16x16_bf16 {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return ((l / M + 1) % (K / a_regs)) * a_regs + i; }
};

template <class A>
struct Config {
  using Atom = A;
  static constexpr ft::Elem elem = ft::Elem::bf16;
  static constexpr int tile_m = 32, tile_n = 64, tile_k = 32;
  static constexpr int warps_m = 2, warps_n = 2;
  static constexpr int stages = 2;
  static constexpr int split_k = 1;
  static constexpr int tiles_per_block = 1;
  static constexpr bool weight_in_stage1 = false;
  static constexpr ft::Reduce reduce = ft::Reduce::atomic;
  static constexpr ft::WeightLayout layout = ft::WeightLayout::plain;
};

// ft::Stage1 with one change: the gather reads the activation row of the next
// token instead of the pair's own token.
template <class Cfg>
struct WrongRowStage1 {
  using Gemm = ft::TiledGemm<Cfg, 2>;
  FT_DEVICE static void run(const ft::MoeArgs& p) {
    const int row0 = ft::block_index_x() * Cfg::tile_m;
    if (row0 >= *p.padded_rows) return;
    const int expert = p.block_experts[row0 / p.align_block];
    const int n0 = ft::block_index_y() * Cfg::tile_n;
    const int pairs = p.tokens * p.topk;
    const long long H = p.hidden, I = p.inter_size;
    const ft::i32* ids = p.sorted_ids + row0;
    Gemm g;
    g.setup(
        [&](int r) -> const ft::u16* {
          const int id = ids[r];
          return id < pairs ? p.x + (long long)((id / p.topk + 1) % p.tokens) * H : nullptr;  // the mutation
        },
        [&](int nb, int r, int k) -> const ft::u16* {
          return p.w1 + ((long long)expert * 2 * I + nb * I + n0 + r) * H + k;
        });
    g.run(0, int(H));
    for (int rm = 0; rm < Gemm::RM; ++rm)
      for (int rn = 0; rn < Gemm::RN; ++rn)
        for (int i = 0; i < Gemm::Atom::c_regs; ++i) {
          const int id = ids[Gemm::acc_row(rm, i)];
          if (id >= pairs) continue;
          const float gate = g.acc[0][rm][rn][i], up = g.acc[1][rm][rn][i];
          const float h = ft::silu(gate, ft::exp_f32(-gate)) * up;
          p.inter[(long long)id * I + n0 + Gemm::acc_col(rn, i)] = ft::from_f32<Cfg::elem>(h);
        }
  }
};

using Good = Config<ft::atom::mfma_f32_16x16x16_bf16>;

}  // namespace

FT_KERNEL(256, ft_control_moe1)(ft::MoeArgs args) { ft::Stage1<Good>::run(args); }
FT_KERNEL(256, ft_mutant_broken_atom_moe1)(ft::MoeArgs args) { ft::Stage1<Config<broken_a_layout>>::run(args); }
FT_KERNEL(256, ft_mutant_wrong_row_moe1)(ft::MoeArgs args) { WrongRowStage1<Good>::run(args); }
