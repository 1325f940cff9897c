// Stage 2 writing Y (reduce = atomic_y) for gfx942, and a mutant whose arrival
// counts finish each chunk one slot early (tests/emu/direct_y_test.cpp): the
// emulator must make the mutant fail verification while the control passes.
#include "ft/kernels.hpp"

namespace {

struct Config {
  using Atom = ft::atom::mfma_f32_16x16x16_bf16;
  static constexpr ft::Elem elem = ft::Elem::bf16;
  static constexpr int tile_m = 32, tile_n = 64, tile_k = 32;
  static constexpr int warps_m = 2, warps_n = 2;
  static constexpr int stages = 2;
  static constexpr int split_k = 1;
  static constexpr int tiles_per_block = 1;
  static constexpr bool weight_in_stage1 = false;
  static constexpr ft::Reduce reduce = ft::Reduce::atomic_y;
  static constexpr ft::WeightLayout layout = ft::WeightLayout::plain;
};

// The mutation: a chunk is finished when it holds 32 values fewer than it
// will (one slot early; a token of one slot is never finished).
struct EarlyY : ft::DirectY<Config> {
  FT_DEVICE static void arrive(const ft::MoeArgs& p, int t, int c, int n) {
    arrive_expecting(p, t, c, n, expected(p, t) - ft::kDirectYColumns);
  }
};

}  // namespace

FT_KERNEL(256, ft_control_y_moe2)(ft::MoeArgs args) { ft::Stage2<Config>::run(args); }
FT_KERNEL(256, ft_mutant_early_y_moe2)(ft::MoeArgs args) { ft::Stage2<Config, EarlyY>::run(args); }
