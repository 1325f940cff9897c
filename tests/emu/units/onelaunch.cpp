// The one-launch layer (templates/ft/moe_onelaunch.hpp) launched directly
// (tests/emu/onelaunch_test.cpp): for gfx942 the mfma 16x16x16 bf16 atom, for
// sm_90a mma.sync m16n8k16 bf16 (the unit is compiled once per target, whose
// wave size picks the Config). The moe1 entry runs stage 1 alone, the moe2
// entry stage 2 alone or, with kFlagOneLaunchLayer, the whole layer; the
// mutant releases each stage-2 tile one stage-1 tile early.
#include "ft/kernels.hpp"

namespace {

struct Config {
#if FT_WAVE_SIZE == 64
  using Atom = ft::atom::mfma_f32_16x16x16_bf16;
  static constexpr int warps_m = 1, warps_n = 1;
#else
  using Atom = ft::atom::mma_m16n8k16_f32_bf16;
  static constexpr int warps_m = 1, warps_n = 2;
#endif
  static constexpr ft::Elem elem = ft::Elem::bf16;
  static constexpr int tile_m = 16, tile_n = 16, tile_k = 64;
  static constexpr int stages = 2;
  static constexpr int split_k = 1;
  static constexpr int tiles_per_block = 1;
  static constexpr bool warp_specialized = false;
  static constexpr bool weight_in_stage1 = false;
  static constexpr ft::Reduce reduce = ft::Reduce::partials_y;
  static constexpr ft::WeightLayout layout = ft::WeightLayout::plain;
};

// The mutation: a stage-2 tile starts when all but one of its row block's
// stage-1 column tiles have arrived.
struct EarlyRelease {
  FT_DEVICE static int needed(int column_tiles) { return column_tiles - 1; }
};

using Layer = ft::OneLaunch<Config, 2>;
static_assert(ft::OneLaunch<Config, 1>::kThreads == 64 && Layer::kThreads == 64, "the test's block size");

}  // namespace

FT_KERNEL(64, ft_onelaunch_moe1)(ft::MoeArgs args) { ft::OneLaunch<Config, 1>::run(args); }
FT_KERNEL(64, ft_onelaunch_moe2)(ft::MoeArgs args) { Layer::run(args); }
FT_KERNEL(64, ft_onelaunch_early_moe2)(ft::MoeArgs args) { ft::OneLaunch<Config, 2, EarlyRelease>::run(args); }
