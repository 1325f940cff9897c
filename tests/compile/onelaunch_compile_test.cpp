// The one-launch family's units built by the real toolchains: the legal
// variants of the space the H200 run asks for on qwen3-30b (ol_tile_n 8 and
// 16 at tile_m 16, both k-tiles and warp layouts) through NVRTC for sm_90a's
// mma.sync -- every unit compiles, shows its atom's matrix instruction, does
// not spill, and its GEMMs' LDS is the variant's -- and tile_m 16 / 32,
// tile_n 16 / 32 through clang-19 for gfx942's mfma, which keeps every value
// in registers (no scratch) but spills 6 to 66 SGPRs into VGPR lanes
// (docs/ONELAUNCH.md, "Not built, and known limits").
#include <gtest/gtest.h>

#include "compile/analyze/analyze.hpp"
#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "generator/space.hpp"
#include "tests/compile/compile_test_support.hpp"

namespace ft {
namespace {

struct OneLaunchSpace {
  const char* target;
  const char* space;
  bool sgpr_spills_allowed;  // gfx942: SGPRs spilled into VGPR lanes, no scratch
};

class OneLaunchCompile : public testing::TestWithParam<OneLaunchSpace> {};

TEST_P(OneLaunchCompile, EveryUnitBuildsWithoutSpills) {
  const Target& target = *find_target(GetParam().target);
  FT_SKIP_UNLESS_BUILDABLE(target);
  auto options = SpaceOptions::parse(GetParam().space);
  ASSERT_TRUE(options) << options.error().describe();
  const Space space = enumerate_space(target, *problem_from_preset("qwen3-30b"), *options);
  int built = 0;
  for (const Variant& v : space.legal) {
    if (v.family != &onelaunch_family()) continue;
    auto object = compile(emit_variant(v), target, test::compile_options_for(test::current_test_id(), std::nullopt));
    ASSERT_TRUE(object) << v.name() << ": " << object.error().describe();
    auto r = analyze(*object, target, v.name(), v.threads(), v.lds_bytes());
    ASSERT_TRUE(r) << v.name() << ": " << r.error().describe();
    EXPECT_EQ(test::check_matrix_ops(r->matrix_ops, *v.atom(), target), "") << v.name();
    if (GetParam().sgpr_spills_allowed)
      EXPECT_EQ(r->scratch_bytes, 0) << v.name() << ": " << r->notes;
    else
      EXPECT_FALSE(r->spills) << v.name() << ": scratch " << r->scratch_bytes << ", spill " << r->spill_bytes << " (" << r->notes << ")";
    EXPECT_EQ(r->lds_bytes, v.lds_bytes()) << v.name();
    EXPECT_GT(r->regs, 0) << v.name();
    ++built;
  }
  EXPECT_GE(built, 4) << GetParam().space;
}

INSTANTIATE_TEST_SUITE_P(
    Targets, OneLaunchCompile,
    testing::Values(OneLaunchSpace{"sm_90a", "atom=mma_m16n8k16_f32_bf16;ol_blocks=264;ol_tile_m=16;ol_tile_n=8,16", false},
                    OneLaunchSpace{"gfx942", "atom=mfma_f32_16x16x16_bf16;ol_blocks=608;ol_tile_m=16,32;ol_tile_n=16,32;ol_tile_k=64", true}),
    [](const auto& info) { return std::string(info.param.target); });

}  // namespace
}  // namespace ft
