// A deliberately broken K-grouped GEMM for gfx942 (tests/emu/kgrouped_test.cpp):
// the configuration of ft_gfx942_kgrouped_bf16_m64n64k32_w2x2_mfma16x16x16_s2
// with lanes of K-group g loading the A operand of K-group g+1. The emulator
// must make it fail verification, while the emitted unit passes.
#include "ft/kernels.hpp"
#include "ft/moe_backward_args.hpp"
#include "ft/moe_kgrouped.hpp"

namespace {

struct broken_a_layout : ft::atom::mfma_f32_16x16x16_bf16 {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return ((l / M + 1) % (K / a_regs)) * a_regs + i; }
};

struct Config {
  using Atom = broken_a_layout;
  static constexpr ft::Elem elem = ft::Elem::bf16;
  static constexpr int tile_m = 64, tile_n = 64, tile_k = 32;
  static constexpr int warps_m = 2, warps_n = 2;
  static constexpr int stages = 2;
};

}  // namespace

FT_KERNEL(256, ft_mutant_kgrouped_broken_atom)(ft::KGroupedArgs args) { ft::KGrouped<Config>::run(args); }
