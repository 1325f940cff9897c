// The fp8 promote axis (generator/families/standard_axes.cpp, axes::promote;
// the kernels' templates/ft/moe_scales.hpp promote_every_of): where it is
// searched, the legality of each value (also with a producer warpgroup,
// whose consumers promote as the shared ring does), names, JSON, --space
// spelling and the register estimate that follows it.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "generator/families/families.hpp"
#include "generator/space.hpp"
#include "generator/variant.hpp"

namespace ft {
namespace {

Problem fp8_problem(Scales scales) {
  Problem p = problem_from_preset("mixtral-8x7b").value();
  p.dtype = DType::e4m3;
  p.scales = scales;
  return p;
}

// A legal-shaped wgmma e4m3 variant: m64n64, one warpgroup, 4 stages.
// producer: a producer warpgroup reading tiled weights.
Variant wgmma_fp8(StageRole role, Scales scales, int promote, bool producer = false) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("wgmma_m64k32_f32_e4m3"));
  v.set("tile_m", 64).set("tile_n", 64).set("tile_k", 128).set("warps_m", 4).set("warps_n", 1).set("stages", 4);
  v.set("scales", int(scales)).set("promote", promote);
  if (producer) v.set("warp_specialized", 1).set("layout", int(WeightLayout::tiled));
  return v;
}

struct LegalityCase {
  const char* label;
  StageRole role;
  Scales scales;
  int promote;
  const char* rejection;  // a part of the reason, or nullptr: legal
  bool producer = false;
};

class Fp8PromoteLegality : public ::testing::TestWithParam<LegalityCase> {};

TEST_P(Fp8PromoteLegality, FollowsTheScales) {
  const LegalityCase& c = GetParam();
  const Variant v = wgmma_fp8(c.role, c.scales, c.promote, c.producer);
  const auto why = why_illegal(v, fp8_problem(c.scales));
  if (!c.rejection) {
    EXPECT_FALSE(why) << v.name() << ": " << *why;
  } else {
    ASSERT_TRUE(why) << v.name() << " is legal";
    EXPECT_NE(why->find(c.rejection), std::string::npos) << *why;
  }
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
                      LegalityCase{"ws_s2_tensor_never", StageRole::stage2, Scales::per_tensor, 0, "change along k", true}),
    [](const auto& info) { return std::string(info.param.label); });

TEST(Fp8Promote, SearchedOnlyWhereTheScalesAreConstantAlongK) {
  const Target& t = *find_target("sm_90a");
  for (Scales scales : {Scales::per_tensor, Scales::per_token, Scales::block128}) {
    const Space space = enumerate_space(t, fp8_problem(scales), SpaceOptions{});
    int never = 0, every = 0;
    for (const Variant& v : space.legal) {
      if (!v.has("promote")) continue;  // the tiled family: promotes every scale group
      const int p = v.get("promote");
      const bool may_vary = v.role == StageRole::stage1 && scales != Scales::block128;
      if (!may_vary) EXPECT_EQ(p, 1) << v.name();
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

}  // namespace
}  // namespace ft
