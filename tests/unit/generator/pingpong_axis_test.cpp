// The wgmma family's pingpong axis (generator/families/wgmma.cpp, the kernels'
// templates/ft/wgmma_gemm.hpp Cfg::pingpong): where it exists (persistent
// producer blocks with two consumer warpgroups), its legality (whole tiles
// per warpgroup: the register estimate counts all of the tile's rows; no
// promotion), name, JSON, Config, shared memory and --space spelling.
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

Problem mixtral(DType dtype) {
  Problem p = problem_from_preset("mixtral-8x7b").value();
  p.dtype = dtype;
  if (dtype == DType::e4m3) p.scales = Scales::per_tensor;
  return p;
}

// A bf16 wgmma stage: tile_m x tile_n, 8x1 warps, producer, `tiles` per block.
Variant producer_stage(StageRole role, int tile_m, int tile_n, int tiles, bool pingpong) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("wgmma_m64k16_f32_bf16"));
  v.set("tile_m", tile_m).set("tile_n", tile_n).set("tile_k", 64).set("warps_m", 8).set("warps_n", 1).set("stages", 4);
  v.set("warp_specialized", 1).set("layout", int(WeightLayout::tiled)).set("tiles_per_block", tiles);
  if (pingpong) v.set("pingpong", 1);
  return v;
}

struct LegalityCase {
  const char* label;
  StageRole role;
  int tile_m, tile_n, tiles;
  const char* rejection;  // a part of the reason, or nullptr: legal
};

class PingPongLegality : public ::testing::TestWithParam<LegalityCase> {};

TEST_P(PingPongLegality, WholeTilesPerWarpgroup) {
  const LegalityCase& c = GetParam();
  const Variant v = producer_stage(c.role, c.tile_m, c.tile_n, c.tiles, true);
  test::expect_legality(v, mixtral(DType::bf16), c.rejection);
}

INSTANTIATE_TEST_SUITE_P(
    Wgmma, PingPongLegality,
    ::testing::Values(LegalityCase{"s1_m64n128", StageRole::stage1, 64, 128, 8, nullptr},    // 128 accumulators
                      LegalityCase{"s2_m64n256", StageRole::stage2, 64, 256, 8, nullptr},    // 128
                      LegalityCase{"s2_m128n128", StageRole::stage2, 128, 128, 8, nullptr},  // 2 x 64
                      LegalityCase{"s1_m128n128", StageRole::stage1, 128, 128, 8, "registers"},  // 2 x 128
                      LegalityCase{"s2_m128n256", StageRole::stage2, 128, 256, 8, "registers"}),
    [](const auto& info) { return std::string(info.param.label); });

TEST(PingPong, OnlyInPersistentProducerBlocksOfTwoConsumers) {
  // One tile per block: the axis is absent (name, JSON and Config as before it).
  const Variant one = producer_stage(StageRole::stage1, 128, 128, 1, false);
  EXPECT_FALSE(one.to_json().contains("pingpong")) << one.name();
  EXPECT_EQ(emit_variant(one).text.find("pingpong"), std::string::npos);
  // A persistent block without ping-pong keeps its name; the Config says false.
  const Variant coop = producer_stage(StageRole::stage1, 128, 128, 8, false);
  EXPECT_EQ(coop.name(), "ft_sm_90a_moe1_bf16_m128n128k64_w8x1_wgmma_s4_tiled_ws_t8");
  EXPECT_EQ(coop.to_json().at("pingpong"), false);
  const Variant pp = producer_stage(StageRole::stage1, 64, 128, 8, true);
  EXPECT_EQ(pp.name(), "ft_sm_90a_moe1_bf16_m64n128k64_w8x1_wgmma_s4_tiled_ws_t8_pp");
  EXPECT_NE(emit_variant(pp).text.find("static constexpr bool pingpong = true;"), std::string::npos);
  auto back = Variant::from_json(pp.to_json());
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(*back, pp);
  // A record with the key where the axis is absent is refused.
  nlohmann::json j = one.to_json();
  j["pingpong"] = true;
  EXPECT_FALSE(Variant::from_json(j));
  // Two turn mbarriers (16 bytes) more shared memory than the cooperative block of the same tile.
  Variant same = pp;
  same.set("pingpong", 0);
  EXPECT_EQ(pp.lds_bytes(), same.lds_bytes() + 16);
}

TEST(PingPong, NotWithPromotingConsumers) {
  Variant v = Variant::of(*find_target("sm_90a"), StageRole::stage2, *find_atom("wgmma_m64k32_f32_e4m3"));
  v.set("tile_m", 64).set("tile_n", 128).set("tile_k", 128).set("warps_m", 8).set("warps_n", 1).set("stages", 4);
  v.set("warp_specialized", 1).set("layout", int(WeightLayout::tiled)).set("tiles_per_block", 8).set("pingpong", 1);
  v.set("scales", int(Scales::per_tensor));
  // Group scales: stage 2 promotes every k-tile.
  const auto why = why_illegal(v, mixtral(DType::e4m3));
  ASSERT_TRUE(why) << v.name() << " is legal";
  EXPECT_NE(why->find("promote"), std::string::npos) << *why;
  // Row scales, fast accumulation: legal.
  v.set("inter_scales", int(InterScales::row)).set("promote", 0);
  EXPECT_FALSE(why_illegal(v, mixtral(DType::e4m3))) << v.name();
}

TEST(PingPong, SearchedInTheDefaultSpaceAndSpelledInSpace) {
  const Target& t = *find_target("sm_90a");
  const Space space = enumerate_space(t, mixtral(DType::bf16), SpaceOptions{});
  int pp = 0;
  for (const Variant& v : space.legal)
    if (v.has("pingpong") && v.to_json().value("pingpong", false)) ++pp;
  EXPECT_GT(pp, 0) << "no ping-pong variant in the default space";
  auto only = SpaceOptions::parse("wgmma_pingpong=on;wgmma_tiles=8;wgmma_producer=on;wgmma_warps=8x1");
  ASSERT_TRUE(only) << only.error().describe();
  const Space restricted = enumerate_space(t, mixtral(DType::bf16), *only);
  ASSERT_FALSE(restricted.legal.empty());
  for (const Variant& v : restricted.legal)
    if (v.family->id() == "wgmma") { EXPECT_NE(v.name().find("_pp"), std::string::npos) << v.name(); }
}

}  // namespace
}  // namespace ft
