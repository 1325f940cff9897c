// The one-launch family (generator/families/onelaunch.cpp): opt-in (no
// variant in any preset space until --space gives ol_blocks), its variants of
// the tiled family's 16-bit atoms, twins of equal values for both roles, its
// fixed standard axes untouched by the shared spellings, its names, JSON and
// emitted units, and its launch shape.
#include <gtest/gtest.h>

#include <algorithm>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "generator/space.hpp"

namespace ft {
namespace {

Problem qwen() { return *problem_from_preset("qwen3-30b"); }

std::size_t count_of(const Space& s, const Family& f) {
  return std::size_t(std::count_if(s.legal.begin(), s.legal.end(), [&](const Variant& v) { return v.family == &f; })) +
         std::size_t(std::count_if(s.rejected.begin(), s.rejected.end(), [&](const Rejection& r) { return r.variant.family == &f; }));
}

Space space_of(const char* target, const std::string& text, const Problem& p = qwen()) {
  auto o = SpaceOptions::parse(text);
  EXPECT_TRUE(o) << o.error().describe();
  return enumerate_space(*find_target(target), p, *o);
}

TEST(OneLaunchFamily, NoPresetSpaceHoldsIt) {
  for (const Target& t : all_targets())
    for (const char* preset : {"default", "wide", "small"})
      EXPECT_EQ(count_of(space_of(std::string(t.name).c_str(), preset), onelaunch_family()), 0u) << t.name << " " << preset;
}

TEST(OneLaunchFamily, OlBlocksAddsTwinsOfTheSixteenBitTiledAtoms) {
  for (const char* target : {"sm_90a", "gfx942"}) {
    const Space s = space_of(target, "ol_blocks=8,264");
    std::vector<Variant> moe1, moe2;
    for (const Variant& v : s.legal) {
      if (v.family != &onelaunch_family()) continue;
      EXPECT_EQ(v.atom()->operand_bytes(), 2) << v.name();
      EXPECT_TRUE(v.atom()->family == "mfma" || v.atom()->family == "mma.sync") << v.name();
      EXPECT_TRUE(v.name().ends_with(fmt::format("_ol{}", v.get("ol_blocks")))) << v.name();
      EXPECT_TRUE(v.contract().whole_layer);
      EXPECT_EQ(v.contract().output, Reduce::partials_y);
      (v.role == StageRole::stage1 ? moe1 : moe2).push_back(v);
    }
    ASSERT_FALSE(moe1.empty()) << target;
    ASSERT_EQ(moe1.size(), moe2.size()) << target;
    for (std::size_t i = 0; i < moe1.size(); ++i) EXPECT_EQ(moe1[i].values, moe2[i].values) << moe1[i].name() << " has no twin";
    // The tiled family's variants are the same as without ol_blocks.
    EXPECT_EQ(count_of(s, tiled_family()), count_of(space_of(target, "default"), tiled_family())) << target;
  }
}

// split_k=, reduce= and layout are the other families' axes here: fixed.
TEST(OneLaunchFamily, SharedSpellingsLeaveItsFixedAxesAlone) {
  const Space s = space_of("sm_90a", "ol_blocks=8;split_k=4;reduce=atomic;atom=mma_m16n8k16_f32_bf16");
  std::size_t seen = 0;
  for (const Variant& v : s.legal) {
    if (v.family != &onelaunch_family()) continue;
    ++seen;
    EXPECT_EQ(v.get("split_k"), 1) << v.name();
    EXPECT_EQ(Reduce(v.get("reduce")), Reduce::partials_y) << v.name();
    EXPECT_EQ(WeightLayout(v.get("layout")), WeightLayout::plain) << v.name();
  }
  EXPECT_GT(seen, 0u);
}

Variant onelaunch(const char* target, const char* atom, StageRole role) {
  Variant v = Variant::of(*find_target(target), role, *find_atom(atom), &onelaunch_family());
  v.set("ol_blocks", 264).set("tile_m", 16).set("tile_n", 16).set("tile_k", 64).set("warps_m", 1).set("warps_n", 2);
  return v;
}

TEST(OneLaunchFamily, NameJsonAndUnit) {
  const Variant v = onelaunch("sm_90a", "mma_m16n8k16_f32_bf16", StageRole::stage2);
  EXPECT_EQ(v.name(), "ft_sm_90a_moe2_bf16_m16n16k64_w1x2_mma16x8x16_s2_partials_y_ol264");
  const nlohmann::json j = v.to_json();
  EXPECT_EQ(j.at("family"), "onelaunch");
  EXPECT_EQ(j.at("ol_blocks"), 264);
  auto back = Variant::from_json(j);
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_TRUE(*back == v);
  EXPECT_FALSE(why_illegal(v, qwen())) << *why_illegal(v, qwen());
  const KernelSource unit = emit_variant(v);
  EXPECT_NE(unit.text.find("using Kernel = ft::OneLaunch<Config, 2>;"), std::string::npos) << unit.text;
  EXPECT_NE(unit.text.find("static constexpr int ol_blocks = 264;"), std::string::npos) << unit.text;
  EXPECT_NE(emit_variant(onelaunch("sm_90a", "mma_m16n8k16_f32_bf16", StageRole::stage1)).text.find("ft::OneLaunch<Config, 1>"),
            std::string::npos);
  // The GEMMs' LDS: 2 stages x (16 + 2 x 16 rows) x (64 + 8) bf16 values.
  EXPECT_EQ(v.lds_bytes(), 2 * 48 * 72 * 2);
  EXPECT_EQ(v.threads(), 64);
}

// {variant edit, problem edit, the reason's words}
struct Rule {
  const char* what;
  void (*edit)(Variant&, Problem&);
  const char* reason;
};

class OneLaunchRules : public ::testing::TestWithParam<Rule> {};

TEST_P(OneLaunchRules, RefusesWithAReason) {
  Variant v = onelaunch("gfx942", "mfma_f32_16x16x16_bf16", StageRole::stage1);
  v.set("warps_n", 1);
  Problem p = qwen();
  ASSERT_FALSE(why_illegal(v, p)) << *why_illegal(v, p);
  GetParam().edit(v, p);
  const auto why = why_illegal(v, p);
  ASSERT_TRUE(why) << GetParam().what;
  EXPECT_NE(why->find(GetParam().reason), std::string::npos) << *why;
}

INSTANTIATE_TEST_SUITE_P(
    Rules, OneLaunchRules,
    ::testing::Values(Rule{"tile_n 8 under the 16-column mfma", [](Variant& v, Problem&) { v.set("tile_n", 8); }, "tile_n 8"},
                      Rule{"stages 1", [](Variant& v, Problem&) { v.set("stages", 1); }, "ping-pong"},
                      Rule{"hidden not a multiple of stage 2's tile", [](Variant&, Problem& p) { p.hidden = 2064; }, "stage 2's tile_n 32"},
                      Rule{"an fp8 problem", [](Variant&, Problem& p) { p.dtype = DType::e4m3; p.scales = Scales::per_tensor; }, "16-bit"},
                      Rule{"inter not a multiple of tile_n", [](Variant&, Problem& p) { p.inter = 776; }, "inter 776"}),
    [](const ::testing::TestParamInfo<Rule>& info) {
      std::string n = info.param.what;
      std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
      return n;
    });

// The persistent grid: ol_blocks, at most one block per work item (every
// routed row block's stage-1 and stage-2 tiles); the route tables after the GEMMs' LDS.
TEST(OneLaunchFamily, LaunchShape) {
  const Variant v = onelaunch("sm_90a", "mma_m16n8k16_f32_bf16", StageRole::stage2);
  const Problem p = qwen();  // I = 768, H = 2048, E = 128
  const LaunchShape big = v.family->launch(v, p, 128);  // 8 row blocks: 8 x (48 + 64) items
  EXPECT_EQ(big.grid_x, 264);
  EXPECT_EQ(big.block, 64);
  EXPECT_EQ(big.lds_bytes, v.lds_bytes() + int(onelaunch_route_bytes(128, 16, 128)));
  EXPECT_EQ(onelaunch_route_bytes(128, 16, 128), (2 * 128 + 4 + 128 + 8) * 4);
  Problem small = p;
  small.inter = 64;
  small.hidden = 64;
  EXPECT_EQ(v.family->launch(v, small, 16).grid_x, 4 + 2);  // one row block: 4 stage-1 and 2 stage-2 tiles
}

}  // namespace
}  // namespace ft
