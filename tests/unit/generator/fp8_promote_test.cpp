// The fp8 promote axis (generator/families/standard_axes.cpp, axes::promote;
// the kernels' templates/ft/moe_scales.hpp promote_every_of): where it is
// searched, the legality of each value (also with a producer warpgroup,
// whose consumers promote as the shared ring does), names, JSON, --space
// spelling and the register estimate that follows it; stage 2's
// inter_scales axis (row scales are constant along k, so such a stage 2
// promotes every n k-tiles or never, and m128n256 fits one accumulator set).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "generator/families/families.hpp"
#include "generator/space.hpp"
#include "generator/variant.hpp"
#include "tests/unit/generator/legality.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft {
namespace {

Problem fp8_problem(Scales scales) { return test::fp8_mixtral(scales); }

// A legal-shaped wgmma e4m3 variant: m64n64, one warpgroup, 4 stages.
// producer: a producer warpgroup reading tiled weights.
// row: stage 2 reading row intermediate scales.
Variant wgmma_fp8(StageRole role, Scales scales, int promote, bool producer = false, bool row = false) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("wgmma_m64k32_f32_e4m3"));
  v.set("tile_m", 64).set("tile_n", 64).set("tile_k", 128).set("warps_m", 4).set("warps_n", 1).set("stages", 4);
  v.set("scales", int(scales)).set("promote", promote);
  if (producer) v.set("warp_specialized", 1).set("layout", int(WeightLayout::tiled));
  if (row) v.set("inter_scales", int(InterScales::row));
  return v;
}

struct LegalityCase {
  const char* label;
  StageRole role;
  Scales scales;
  int promote;
  const char* rejection;  // a part of the reason, or nullptr: legal
  bool producer = false;
  bool row = false;  // stage 2 on row intermediate scales
};

class Fp8PromoteLegality : public ::testing::TestWithParam<LegalityCase> {};

TEST_P(Fp8PromoteLegality, FollowsTheScales) {
  const LegalityCase& c = GetParam();
  const Variant v = wgmma_fp8(c.role, c.scales, c.promote, c.producer, c.row);
  test::expect_legality(v, fp8_problem(c.scales), c.rejection);
}

INSTANTIATE_TEST_SUITE_P(
    Wgmma, Fp8PromoteLegality,
    ::testing::Values(LegalityCase{"s1_tensor_never", StageRole::stage1, Scales::per_tensor, 0, nullptr},
                      LegalityCase{"s1_tensor_every", StageRole::stage1, Scales::per_tensor, 1, nullptr},
                      LegalityCase{"s1_token_every4", StageRole::stage1, Scales::per_token, 4, nullptr},
                      LegalityCase{"s1_block128_never", StageRole::stage1, Scales::block128, 0, "change along k"},
                      LegalityCase{"s1_block128_every2", StageRole::stage1, Scales::block128, 2, "change along k"},
                      LegalityCase{"s1_block128_every", StageRole::stage1, Scales::block128, 1, nullptr},
                      LegalityCase{"s2_tensor_never", StageRole::stage2, Scales::per_tensor, 0, "change along k"},
                      LegalityCase{"s2_token_every4", StageRole::stage2, Scales::per_token, 4, "change along k"},
                      LegalityCase{"s2_tensor_every", StageRole::stage2, Scales::per_tensor, 1, nullptr},
                      LegalityCase{"s1_tensor_negative", StageRole::stage1, Scales::per_tensor, -1, "not a count"},
                      // A producer warpgroup's consumers promote (or not) under the same rules.
                      LegalityCase{"ws_s1_tensor_never", StageRole::stage1, Scales::per_tensor, 0, nullptr, true},
                      LegalityCase{"ws_s1_token_never", StageRole::stage1, Scales::per_token, 0, nullptr, true},
                      LegalityCase{"ws_s1_tensor_every", StageRole::stage1, Scales::per_tensor, 1, nullptr, true},
                      LegalityCase{"ws_s1_token_every4", StageRole::stage1, Scales::per_token, 4, nullptr, true},
                      LegalityCase{"ws_s1_block128", StageRole::stage1, Scales::block128, 1, nullptr, true},
                      LegalityCase{"ws_s1_block128_never", StageRole::stage1, Scales::block128, 0, "change along k", true},
                      LegalityCase{"ws_s2_tensor", StageRole::stage2, Scales::per_tensor, 1, nullptr, true},
                      LegalityCase{"ws_s2_block128", StageRole::stage2, Scales::block128, 1, nullptr, true},
                      LegalityCase{"ws_s2_tensor_never", StageRole::stage2, Scales::per_tensor, 0, "change along k", true},
                      // Row intermediate scales: constant along k in per-tensor and per-token layers.
                      LegalityCase{"s2_row_tensor_never", StageRole::stage2, Scales::per_tensor, 0, nullptr, false, true},
                      LegalityCase{"s2_row_token_every4", StageRole::stage2, Scales::per_token, 4, nullptr, false, true},
                      LegalityCase{"ws_s2_row_token_never", StageRole::stage2, Scales::per_token, 0, nullptr, true, true},
                      LegalityCase{"s2_row_tensor_every", StageRole::stage2, Scales::per_tensor, 1, "promoting every k-tile", false, true},
                      LegalityCase{"s2_row_block128", StageRole::stage2, Scales::block128, 1, "block128", false, true},
                      LegalityCase{"s2_row_block128_never", StageRole::stage2, Scales::block128, 0, "block128", true, true}),
    [](const auto& info) { return std::string(info.param.label); });

// Persistent producer blocks do not promote (ptxas serialised their wgmma);
// without promotion they stay legal.
TEST(Fp8Promote, PersistentProducerBlocksDoNotPromote) {
  Variant every = wgmma_fp8(StageRole::stage2, Scales::per_tensor, 1, true);
  every.set("tiles_per_block", 8);
  const auto why = why_illegal(every, fp8_problem(Scales::per_tensor));
  ASSERT_TRUE(why) << every.name() << " is legal";
  EXPECT_NE(why->find("promoting consumers"), std::string::npos) << *why;
  Variant never = wgmma_fp8(StageRole::stage1, Scales::per_tensor, 0, true);
  never.set("tiles_per_block", 8);
  EXPECT_FALSE(why_illegal(never, fp8_problem(Scales::per_tensor)));
}

TEST(Fp8Promote, SearchedOnlyWhereTheScalesAreConstantAlongK) {
  const Target& t = *find_target("sm_90a");
  for (Scales scales : {Scales::per_tensor, Scales::per_token, Scales::block128}) {
    const Space space = enumerate_space(t, fp8_problem(scales), SpaceOptions{});
    int never = 0, every = 0;
    for (const Variant& v : space.legal) {
      if (!v.has("promote")) continue;  // the tiled family: promotes every scale group
      const int p = v.get("promote");
      const bool may_vary = (v.role == StageRole::stage1 || fp8::inter_row_scales(v)) && scales != Scales::block128;
      if (!may_vary) { EXPECT_EQ(p, 1) << v.name(); }
      never += p == 0;
      every += p == 1;
    }
    EXPECT_GT(every, 0) << to_string(scales);
    if (scales == Scales::block128) EXPECT_EQ(never, 0);
    else EXPECT_GT(never, 0) << to_string(scales) << ": no fast-accumulation stage 1 in the default space";
  }
}

TEST(Fp8Promote, NamesJsonAndConfig) {
  const Variant never = wgmma_fp8(StageRole::stage1, Scales::per_tensor, 0);
  const Variant every = wgmma_fp8(StageRole::stage1, Scales::per_tensor, 1);
  const Variant four = wgmma_fp8(StageRole::stage1, Scales::per_tensor, 4);
  EXPECT_EQ(never.name(), "ft_sm_90a_moe1_e4m3_m64n64k128_w4x1_wgmma_s4_tensor_fastacc");
  EXPECT_EQ(every.name(), "ft_sm_90a_moe1_e4m3_m64n64k128_w4x1_wgmma_s4_tensor");  // as before the axis
  EXPECT_EQ(four.name(), "ft_sm_90a_moe1_e4m3_m64n64k128_w4x1_wgmma_s4_tensor_promote4");
  for (const Variant* v : {&never, &every, &four}) {
    auto back = Variant::from_json(v->to_json());
    ASSERT_TRUE(back) << back.error().describe();
    EXPECT_EQ(*back, *v);
  }
  // A record from before the axis promoted every k-tile.
  nlohmann::json old = never.to_json();
  old.erase("promote");
  auto read = Variant::from_json(old);
  ASSERT_TRUE(read) << read.error().describe();
  EXPECT_EQ(read->get("promote"), 1);
  // 16-bit variants have no promote key and do not promote.
  const Variant bf16 = Variant::of(*find_target("sm_90a"), StageRole::stage1, *find_atom("wgmma_m64k16_f32_bf16"));
  EXPECT_FALSE(bf16.to_json().contains("promote"));
  EXPECT_EQ(fp8::promote_every(bf16), 0);
}

TEST(Fp8Promote, SpaceSpellingTakesZero) {
  auto o = SpaceOptions::parse("promote=0,1,4");
  ASSERT_TRUE(o) << o.error().describe();
  auto bad = SpaceOptions::parse("promote=-1");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().describe().find("integer >= 0 for promote"), std::string::npos) << bad.error().describe();
  EXPECT_FALSE(SpaceOptions::parse("wgmma_stages=0")) << "other integer axes stay positive";
}

TEST(Fp8Promote, RegisterEstimateFollows) {
  // Promoting keeps a second accumulator set: N / 2 more per lane of the 64-row block.
  const Variant never = wgmma_fp8(StageRole::stage1, Scales::per_token, 0);
  const Variant every = wgmma_fp8(StageRole::stage1, Scales::per_token, 1);
  const Variant four = wgmma_fp8(StageRole::stage1, Scales::per_token, 4);
  EXPECT_EQ(every.register_estimate() - never.register_estimate(), 2 * 64 / 2);  // stage 1: N = 2 x 64
  EXPECT_EQ(four.register_estimate(), every.register_estimate());
}

// Stage 2's intermediate scales: searched in per-tensor and per-token spaces
// (row variants never promote every k-tile there), absent from block128's and
// from stage 1; named "_rowscale"; JSON round trip; a record without the key
// reads group scales; without promotion m128n256 fits the register file.
TEST(Fp8RowScales, SpaceNamesJsonAndRegisters) {
  const Target& t = *find_target("sm_90a");
  for (Scales scales : {Scales::per_tensor, Scales::block128}) {
    const Space space = enumerate_space(t, fp8_problem(scales), SpaceOptions{});
    int rows = 0, row_fastacc = 0;
    for (const Variant& v : space.legal) {
      if (!fp8::inter_row_scales(v)) continue;
      ++rows;
      EXPECT_NE(v.get("promote"), 1) << v.name();
      row_fastacc += v.get("promote") == 0;
    }
    if (scales == Scales::block128) EXPECT_EQ(rows, 0);
    else EXPECT_GT(row_fastacc, 0) << "no fast-accumulating row-scale stage 2 in the default space";
  }
  const Variant row = wgmma_fp8(StageRole::stage2, Scales::per_tensor, 0, false, true);
  EXPECT_EQ(row.name(), "ft_sm_90a_moe2_e4m3_m64n64k128_w4x1_wgmma_s4_atomic_tensor_rowscale_fastacc");
  auto back = Variant::from_json(row.to_json());
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(*back, row);
  nlohmann::json old = wgmma_fp8(StageRole::stage2, Scales::per_tensor, 1).to_json();
  old.erase("inter_scales");
  auto read = Variant::from_json(old);
  ASSERT_TRUE(read) << read.error().describe();
  EXPECT_FALSE(fp8::inter_row_scales(*read));
  EXPECT_FALSE(wgmma_fp8(StageRole::stage1, Scales::per_tensor, 0).to_json().contains("inter_scales"));
  // m128n256 on two consumer warpgroups: legal on row scales without promotion, not on group scales.
  Variant wide = wgmma_fp8(StageRole::stage2, Scales::per_tensor, 0, true, true);
  wide.set("tile_m", 128).set("tile_n", 256).set("warps_m", 8);
  EXPECT_FALSE(why_illegal(wide, fp8_problem(Scales::per_tensor))) << wide.name();
  Variant grouped = wide;
  grouped.set("inter_scales", int(InterScales::group)).set("promote", 1);
  const auto why = why_illegal(grouped, fp8_problem(Scales::per_tensor));
  ASSERT_TRUE(why) << grouped.name() << " is legal";
  EXPECT_NE(why->find("registers"), std::string::npos) << *why;
}

}  // namespace
}  // namespace ft
