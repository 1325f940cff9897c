// Deliberately broken routed dgrad GEMMs for gfx942 (tests/emu/dgrad_test.cpp):
// the configuration of ft_gfx942_dgrad2_bf16_m32n64k32_w2x2_mfma16x16x16_s2 and
// its dgrad1 twin with lanes of K-group g loading the A operand of K-group g+1.
// The emulator must make them fail verification, while the emitted units pass.
#include "ft/kernels.hpp"
#include "ft/moe_backward_args.hpp"
#include "ft/moe_dgrad.hpp"

namespace {

struct broken_a_layout : ft::atom::mfma_f32_16x16x16_bf16 {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return ((l / M + 1) % (K / a_regs)) * a_regs + i; }
};

template <ft::DgradEpilogue E>
struct Config {
  using Atom = broken_a_layout;
  static constexpr ft::Elem elem = ft::Elem::bf16;
  static constexpr int tile_m = 32, tile_n = 64, tile_k = 32;
  static constexpr int warps_m = 2, warps_n = 2;
  static constexpr int stages = 2;
  static constexpr ft::DgradEpilogue epilogue = E;
};

}  // namespace

FT_KERNEL(256, ft_mutant_dgrad2_broken_atom)(ft::DgradArgs args) {
  ft::RoutedDgrad<Config<ft::DgradEpilogue::swiglu>>::run(args);
}
FT_KERNEL(256, ft_mutant_dgrad1_broken_atom)(ft::DgradArgs args) {
  ft::RoutedDgrad<Config<ft::DgradEpilogue::scatter>>::run(args);
}
