// Deliberately broken wgmma dgrad GEMMs for sm_90a (tests/emu/dgrad_test.cpp):
// the configuration of ft_sm_90a_dgrad2_bf16_m64n64k64_w4x1_wgmma_s3 and its
// dgrad1 twin with an atom that issues the weight operand (B) without its
// transpose immediate, so the MN-major tile is read as if it were K-major.
// The emulator must make them fail verification, while the emitted units pass.
#include "ft/kernels.hpp"
#include "ft/moe_backward_args.hpp"
#include "ft/moe_dgrad_wgmma.hpp"

namespace {

struct b_without_transpose : ft::atom::wgmma_m64k16_f32_bf16 {
  template <int N, bool TA, bool TB>
  FT_DEVICE static void mma_mn(float (&d)[N / 2], ft::u64 a, ft::u64 b) {
    ft::atom::wgmma_m64k16_f32_bf16::mma_mn<N, TA, false>(d, a, b);
  }
};

template <ft::DgradEpilogue E>
struct Config {
  using Atom = b_without_transpose;
  static constexpr ft::Elem elem = ft::Elem::bf16;
  static constexpr int tile_m = 64, tile_n = 64, tile_k = 64;
  static constexpr int warps_m = 4, warps_n = 1;
  static constexpr int stages = 3;
  static constexpr ft::DgradEpilogue epilogue = E;
};

}  // namespace

FT_KERNEL(128, ft_mutant_dgrad2_wgmma_b_layout)(ft::DgradArgs args) {
  ft::RoutedDgradWgmma<Config<ft::DgradEpilogue::swiglu>>::run(args);
}
FT_KERNEL(128, ft_mutant_dgrad1_wgmma_b_layout)(ft::DgradArgs args) {
  ft::RoutedDgradWgmma<Config<ft::DgradEpilogue::scatter>>::run(args);
}
