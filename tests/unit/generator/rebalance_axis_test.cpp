// The wgmma family's wgmma_regs axis (generator/families/wgmma.cpp; the kernels'
// templates/ft/wgmma_gemm.hpp Cfg::rebalance, RegisterSplit in shape_rules.hpp):
// where it exists (persistent producer blocks with two or three consumer
// warpgroups), its legality (only blocks that do not fit the register file
// evenly, consumers within the split's count), name, Config, shared memory
// (the producer's pointer table), kernel macro and its place in the spaces.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "generator/space.hpp"
#include "generator/variant.hpp"
#include "tests/unit/generator/legality.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft {
namespace {

Problem mixtral_fp8() {
  Problem p = problem_from_preset("mixtral-8x7b").value();
  p.dtype = DType::e4m3;
  p.scales = Scales::per_tensor;
  return p;
}

// An fp8 per-tensor wgmma stage on row scales with fast accumulation.
Variant fp8_stage(StageRole role, int tile_m, int tile_n, int consumers, int tiles, bool rebalance) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("wgmma_m64k32_f32_e4m3"));
  v.set("tile_m", tile_m).set("tile_n", tile_n).set("tile_k", 128).set("warps_m", 4 * consumers).set("warps_n", 1);
  v.set("stages", 3).set("warp_specialized", 1).set("layout", int(WeightLayout::tiled)).set("tiles_per_block", tiles);
  v.set("scales", int(Scales::per_tensor)).set("promote", 0);
  if (role == StageRole::stage2) v.set("inter_scales", int(InterScales::row)).set("split_k", 1);
  if (tiles > 1) v.set("rebalance", rebalance ? 1 : 0);
  return v;
}

TEST(RegisterSplit, SharesTheFileBetweenTheRoles) {
  using S = RegisterSplit;
  EXPECT_EQ(S::entry(512), 128);
  EXPECT_EQ(S::entry(384), 168);
  EXPECT_EQ(S::consumer(3), 160);  // (128 x 512 - 32 x 128) / 384
  EXPECT_EQ(S::consumer(2), 232);  // (168 x 384 - 32 x 128) / 256, a multiple of 8
  for (int consumers : {2, 3})
    EXPECT_LE(S::kProducer * 128 + S::consumer(consumers) * 128 * consumers, S::kFile) << consumers;
}

struct LegalityCase {
  const char* label;
  StageRole role;
  int tile_m, tile_n, consumers;
  const char* rejection;  // a part of the reason, or nullptr: legal
};

class RebalanceLegality : public ::testing::TestWithParam<LegalityCase> {};

TEST_P(RebalanceLegality, OnlyWhereTheEvenSplitDoesNotFit) {
  const LegalityCase& c = GetParam();
  const Variant v = fp8_stage(c.role, c.tile_m, c.tile_n, c.consumers, 8, true);
  test::expect_legality(v, mixtral_fp8(), c.rejection);
}

INSTANTIATE_TEST_SUITE_P(
    Wgmma, RebalanceLegality,
    ::testing::Values(
        // three consumers x 128 accumulators: the even 128 registers do not hold them, 160 do
        LegalityCase{"s2_m192n256_x3", StageRole::stage2, 192, 256, 3, nullptr},
        LegalityCase{"s1_m192n128_x3", StageRole::stage1, 192, 128, 3, nullptr},
        // fits 168 evenly: the same kernel under a second name
        LegalityCase{"s2_m128n256_x2", StageRole::stage2, 128, 256, 2, "evenly"},
        LegalityCase{"s2_m192n64_x3", StageRole::stage2, 192, 64, 3, "evenly"},
        // two 64-row blocks per consumer x 256 columns: more than a rebalance gives
        LegalityCase{"s1_m256n128_x2", StageRole::stage1, 256, 128, 2, "consumer lane"}),
    [](const auto& info) { return std::string(info.param.label); });

TEST(Rebalance, ItsNameConfigTableAndEntryPoint) {
  const Variant rb = fp8_stage(StageRole::stage2, 192, 256, 3, 8, true);
  EXPECT_EQ(rb.name(), "ft_sm_90a_moe2_e4m3_m192n256k128_w12x1_wgmma_s3_atomic_tiled_ws_t8_rb_tensor_rowscale_fastacc");
  const std::string unit = emit_variant(rb).text;
  EXPECT_NE(unit.find("static constexpr bool rebalance = true;"), std::string::npos);
  EXPECT_NE(unit.find("FT_KERNEL_REBALANCED("), std::string::npos) << "one block per SM: the entry count is file / threads";
  // The producer's A-row pointers: 8 bytes per 16-byte chunk of a k-tile's A rows.
  Variant even = rb;
  even.set("rebalance", 0);
  EXPECT_EQ(rb.lds_bytes(), even.lds_bytes() + 192 * 8 * 8);
  EXPECT_EQ(emit_variant(even).text.find("FT_KERNEL_REBALANCED("), std::string::npos);
  auto back = Variant::from_json(rb.to_json());
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(*back, rb);
  // One tile per block: the axis is absent, and a record naming it is refused.
  const Variant one = fp8_stage(StageRole::stage2, 128, 256, 2, 1, false);
  EXPECT_FALSE(one.to_json().contains("rebalance")) << one.name();
  nlohmann::json j = one.to_json();
  j["rebalance"] = true;
  EXPECT_FALSE(Variant::from_json(j));
}

TEST(Rebalance, OptInOutsideTheWideSpace) {
  const Target& t = *find_target("sm_90a");
  auto count = [&](const SpaceOptions& o) {
    int n = 0;
    for (const Variant& v : enumerate_space(t, mixtral_fp8(), o).legal)
      if (v.name().find("_rb") != std::string::npos) ++n;
    return n;
  };
  EXPECT_EQ(count(SpaceOptions{}), 0) << "measured slower on the H200: not in the default space";
  auto wide = SpaceOptions::parse("wide");
  ASSERT_TRUE(wide) << wide.error().describe();
  EXPECT_GT(count(*wide), 0);
  auto spelled = SpaceOptions::parse("wgmma_regs=rebalance;wgmma_warps=12x1;wgmma_tile_m=192;wgmma_producer=on;wgmma_tiles=8");
  ASSERT_TRUE(spelled) << spelled.error().describe();
  EXPECT_GT(count(*spelled), 0);
}

}  // namespace
}  // namespace ft
