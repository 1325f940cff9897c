#include "generator/space.hpp"

#include <gtest/gtest.h>

#include <set>

#include <nlohmann/json.hpp>

#include "generator/families/families.hpp"
#include "layer/program.hpp"

namespace ft {
namespace {

Problem mixtral() { return *problem_from_preset("mixtral-8x7b"); }

class DefaultSpace : public ::testing::TestWithParam<const char*> {};

TEST_P(DefaultSpace, AtLeast24LegalVariantsForMixtral) {
  const Target& t = *find_target(GetParam());
  Space s = enumerate_space(t, mixtral(), SpaceOptions{});
  EXPECT_GE(s.legal.size(), 24u) << t.name;
  std::set<std::string> names;
  for (const Variant& v : s.legal) {
    EXPECT_FALSE(why_illegal(v, mixtral())) << v.name();
    EXPECT_LE(v.lds_bytes(), t.lds_bytes) << v.name();
    EXPECT_TRUE(names.insert(v.name()).second) << "duplicate name " << v.name();
  }
  // Both stages are covered.
  EXPECT_TRUE(std::any_of(s.legal.begin(), s.legal.end(), [](const Variant& v) { return v.role == StageRole::stage1; }));
  EXPECT_TRUE(std::any_of(s.legal.begin(), s.legal.end(), [](const Variant& v) { return v.role == StageRole::stage2; }));
}

INSTANTIATE_TEST_SUITE_P(Targets, DefaultSpace, ::testing::Values("gfx90a", "gfx942", "gfx950", "sm_90a"));

struct IllegalCase {
  const char* target;
  const char* atom;
  int tile_m, tile_n, tile_k, warps_m, warps_n, stages, split_k;
  StageRole kind;
  Reduce reduce;
  const char* reason;
};

class Legality : public ::testing::TestWithParam<IllegalCase> {};

TEST_P(Legality, RejectsWithReason) {
  const IllegalCase& c = GetParam();
  ASSERT_TRUE(find_target(c.target) && find_atom(c.atom));
  Variant v = Variant::of(*find_target(c.target), c.kind, *find_atom(c.atom));
  v.set("tile_m", c.tile_m).set("tile_n", c.tile_n).set("tile_k", c.tile_k).set("warps_m", c.warps_m).set("warps_n", c.warps_n);
  v.set("stages", c.stages).set("split_k", c.split_k).set("reduce", int(Reduce(c.reduce)));
  auto why = why_illegal(v, mixtral());
  ASSERT_TRUE(why) << v.name();
  EXPECT_NE(why->find(c.reason), std::string::npos) << *why;
}

INSTANTIATE_TEST_SUITE_P(
    Table, Legality,
    ::testing::Values(
        IllegalCase{"gfx942", "mfma_f32_16x16x32_bf16", 64, 64, 64, 2, 2, 2, 1, StageRole::stage1, Reduce::atomic, "does not exist on gfx942"},
        IllegalCase{"gfx942", "mfma_f32_16x16x16_bf16", 128, 128, 64, 2, 2, 2, 1, StageRole::stage1, Reduce::atomic, "LDS use 110592 bytes exceeds 65536"},
        IllegalCase{"gfx942", "mfma_f32_32x32x8_bf16", 32, 64, 32, 2, 2, 2, 1, StageRole::stage1, Reduce::atomic, "tile_m 32 is not a multiple of warps_m 2 x atom M 32"},
        IllegalCase{"gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 24, 2, 2, 2, 1, StageRole::stage1, Reduce::atomic, "tile_k 24"},
        IllegalCase{"gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2, 2, StageRole::stage2, Reduce::partials, "split-K needs atomic"},
        IllegalCase{"gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2, 2, StageRole::stage1, Reduce::atomic, "stage 2 only"},
        IllegalCase{"gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 3, 1, StageRole::stage1, Reduce::atomic, "stages 3"},
        IllegalCase{"gfx942", "mfma_f32_16x16x16_bf16", 64, 256, 32, 4, 8, 2, 1, StageRole::stage1, Reduce::atomic, "threads per block exceed 1024"},
        IllegalCase{"sm_90a", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2, 1, StageRole::stage1, Reduce::atomic, "does not exist on sm_90a"},
        IllegalCase{"gfx950", "mfma_f32_32x32x16_bf16", 256, 256, 64, 2, 2, 1, 1, StageRole::stage1, Reduce::atomic, "registers per lane"},
        IllegalCase{"sm_90a", "mma_m16n8k16_f32_bf16", 64, 96, 64, 2, 2, 1, 1, StageRole::stage1, Reduce::atomic, "inter 14336 is not a multiple of tile_n 96"},
        // The Hopper wgmma family's own rules.
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 64, 2, 2, 4, 1, StageRole::stage1, Reduce::atomic, "wgmma needs 4x1, 8x1 or 12x1 warps"},
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 192, 64, 64, 12, 1, 3, 1, StageRole::stage1, Reduce::atomic, "do not split evenly over 384 threads"},
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 64, 8, 1, 4, 1, StageRole::stage1, Reduce::atomic, "does not give each of 2 warpgroups whole 64-row"},
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 128, 256, 64, 8, 1, 4, 1, StageRole::stage1, Reduce::atomic, "wgmma N = 2 weight matrices x tile_n 256 = 512"},
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 128, 128, 32, 8, 1, 4, 1, StageRole::stage1, Reduce::atomic, "k-tiles are 64 deep"},
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 2, 1, StageRole::stage1, Reduce::atomic, "at least 3 stages"},
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 7, 1, StageRole::stage1, Reduce::atomic, "LDS use 345088 bytes exceeds 232448"},
        IllegalCase{"sm_90a", "wgmma_m64k16_f32_bf16", 128, 128, 64, 4, 1, 4, 1, StageRole::stage1, Reduce::atomic, "registers per lane"},
        IllegalCase{"gfx942", "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 4, 1, StageRole::stage1, Reduce::atomic, "does not exist on gfx942"}));

// The prefill stage-2 shape of the Hopper family: 128 x 256, two warpgroups, 4 stages.
Variant hopper_stage2() {
  Variant v = Variant::of(*find_target("sm_90a"), StageRole::stage2, *find_atom("wgmma_m64k16_f32_bf16"));
  v.set("tile_m", 128).set("tile_n", 256).set("tile_k", 64).set("warps_m", 8).set("warps_n", 1).set("stages", 4);
  return v;
}

TEST(Space, WarpSpecialisationIsAWgmmaOption) {
  Variant v = hopper_stage2();
  const int shared_ring = v.lds_bytes();
  v.set("warp_specialized", 1);
  // The producer streams weights by bulk copy from the tiled layout: plain
  // weights are illegal with it, tiled ones without it.
  auto plain = why_illegal(v, mixtral());
  ASSERT_TRUE(plain);
  EXPECT_NE(plain->find("reads tiled or mapped weights, not plain ones"), std::string::npos) << *plain;
  v.set("layout", int(WeightLayout::tiled));
  EXPECT_FALSE(why_illegal(v, mixtral())) << v.name();
  EXPECT_EQ(v.threads(), 384);                       // two consumer warpgroups + the producer
  EXPECT_EQ(v.lds_bytes(), shared_ring + 16 * 4);    // a full and an empty mbarrier per stage
  EXPECT_TRUE(v.name().ends_with("_atomic_tiled_ws")) << v.name();
  Variant ring = v;
  ring.set("warp_specialized", 0);
  auto tiled_ring = why_illegal(ring, mixtral());
  ASSERT_TRUE(tiled_ring);
  EXPECT_NE(tiled_ring->find("reads plain weights, not tiled ones"), std::string::npos) << *tiled_ring;
  auto back = Variant::from_json(v.to_json());
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_TRUE(back->get("warp_specialized"));
  nlohmann::json old_record = v.to_json();
  old_record.erase("warp_specialized");  // written before the field existed
  auto old = Variant::from_json(old_record);
  ASSERT_TRUE(old) << old.error().describe();
  EXPECT_FALSE(old->get("warp_specialized"));
  old_record["warp_specialized"] = "yes";
  EXPECT_FALSE(Variant::from_json(old_record));

  Variant m = *default_variant(*find_target("sm_90a"), mixtral(), StageRole::stage1);
  m.set("warp_specialized", 1);
  auto why = why_illegal(m, mixtral());
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("wgmma-family option"), std::string::npos) << *why;

  auto o = SpaceOptions::parse("wgmma_producer=on,off");
  ASSERT_TRUE(o);
  const Axis& producer = wgmma_family().axes()[wgmma_family().index_of("warp_specialized")];
  EXPECT_EQ(o->values(producer), (std::vector<AxisValue>{1, 0}));
  EXPECT_FALSE(SpaceOptions::parse("wgmma_producer=maybe"));
  EXPECT_EQ(SpaceOptions{}.values(producer), (std::vector<AxisValue>{0, 1}));  // both win somewhere: searched by default

  // Only the wgmma family reads tiled weights.
  Variant tiled_mma = *default_variant(*find_target("sm_90a"), mixtral(), StageRole::stage1);
  tiled_mma.set("layout", int(WeightLayout::tiled));
  auto no_tiles = why_illegal(tiled_mma, mixtral());
  ASSERT_TRUE(no_tiles);
  EXPECT_NE(no_tiles->find("tiled weight layout feeds a wgmma producer warpgroup"), std::string::npos) << *no_tiles;
}

TEST(Space, WgmmaFamilyHasItsOwnAxes) {
  auto o = SpaceOptions::parse("wgmma_tile_m=128;wgmma_tile_n=64,256;wgmma_warps=8x1;wgmma_stages=3,5;kind=moe2");
  ASSERT_TRUE(o) << o.error().describe();
  const Family& w = wgmma_family();
  EXPECT_EQ(o->values(w.axes()[w.index_of("tile_m")]), (std::vector<AxisValue>{128}));
  EXPECT_EQ(o->values(w.axes()[w.index_of("warps")]), (std::vector<AxisValue>{pack_pair(8, 1)}));
  EXPECT_EQ(o->values(w.axes()[w.index_of("stages")]), (std::vector<AxisValue>{3, 5}));
  // The wgmma spellings leave the tiled family's axes at their presets.
  const Family& t = tiled_family();
  EXPECT_EQ(o->values(t.axes()[t.index_of("tile_m")]), (std::vector<AxisValue>{16, 32, 64, 128}));
  EXPECT_FALSE(SpaceOptions::parse("wgmma_warps=8"));
  // The wgmma axes shape only wgmma variants, and every legal one is 64 deep,
  // whole warpgroups, plain weights without a producer warpgroup and tiled
  // ones with it; the mma.sync ones keep their own axes.
  Space s = enumerate_space(*find_target("sm_90a"), mixtral(), *o);
  int wgmma = 0;
  for (const Variant& v : s.legal) {
    if (!v.atom()->warpgroup()) {
      EXPECT_NE(v.get("warps_m"), 8) << v.name();
      continue;
    }
    ++wgmma;
    EXPECT_EQ(v.family, &wgmma_family()) << v.name();
    EXPECT_EQ(v.get("tile_m"), 128) << v.name();
    EXPECT_EQ(v.get("tile_k"), 64) << v.name();
    EXPECT_EQ(v.get("warps_m") * v.get("warps_n"), 8) << v.name();
    EXPECT_TRUE(v.get("stages") == 3 || v.get("stages") == 5) << v.name();
    EXPECT_EQ(WeightLayout(v.get("layout")), v.get("warp_specialized") ? WeightLayout::tiled : WeightLayout::plain)
        << v.name();
    EXPECT_NE(v.name().find("_wgmma_s"), std::string::npos) << v.name();
  }
  EXPECT_GT(wgmma, 0);
  // The default space of sm_90a holds both families; gfx942's holds no wgmma.
  auto has_wgmma = [](const Space& sp) {
    return std::any_of(sp.legal.begin(), sp.legal.end(), [](const Variant& v) { return v.atom()->warpgroup(); });
  };
  EXPECT_TRUE(has_wgmma(enumerate_space(*find_target("sm_90a"), mixtral(), SpaceOptions{})));
  EXPECT_FALSE(has_wgmma(enumerate_space(*find_target("gfx942"), mixtral(), SpaceOptions{})));
}

TEST(Space, ParseOverridesAndErrors) {
  auto o = SpaceOptions::parse("wide;tile_m=16,64;warps=2x2;kind=moe2;reduce=partials");
  ASSERT_TRUE(o) << o.error().describe();
  const Family& t = tiled_family();
  EXPECT_EQ(o->values(t.axes()[t.index_of("tile_m")]), (std::vector<AxisValue>{16, 64}));
  EXPECT_EQ(o->values(t.axes()[t.index_of("warps")]), (std::vector<AxisValue>{pack_pair(2, 2)}));
  EXPECT_EQ(o->roles, (std::vector<StageRole>{StageRole::stage2}));
  EXPECT_EQ(o->values(t.axes()[t.index_of("stages")]), (std::vector<AxisValue>{1, 2}));  // from wide
  EXPECT_EQ(o->values(t.axes()[t.index_of("reduce")]), (std::vector<AxisValue>{int(Reduce::partials)}));
  // A preset word starts again from its preset.
  auto again = SpaceOptions::parse("tile_m=16;small");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->values(t.axes()[t.index_of("tile_m")]), (std::vector<AxisValue>{32, 64}));
  auto unknown = SpaceOptions::parse("tile_q=1");
  ASSERT_FALSE(unknown);
  // The message lists every axis the registry spells.
  for (std::string_view spelling : space_axis_spellings())
    EXPECT_NE(unknown.error().message.find(spelling), std::string::npos) << spelling << ": " << unknown.error().message;
  EXPECT_FALSE(SpaceOptions::parse("tile_q=1"));
  EXPECT_FALSE(SpaceOptions::parse("tile_m=0"));
  EXPECT_FALSE(SpaceOptions::parse("warps=22"));
  EXPECT_FALSE(SpaceOptions::parse("atom=mfma_nope"));
  EXPECT_FALSE(SpaceOptions::parse("huge"));
}

// "moe1.axis=..." narrows one stage kind only, ahead of the axis for every
// kind; the kind before the dot must be a stage kind, and kind / atom take none.
TEST(Space, PerKindOverridesApplyToThatKindOnly) {
  auto o = SpaceOptions::parse("small;tile_m=32;moe1.tile_m=64;moe2.wgmma_tile_m=128");
  ASSERT_TRUE(o) << o.error().describe();
  const Family& t = tiled_family();
  const Axis& tile_m = t.axes()[t.index_of("tile_m")];
  EXPECT_EQ(o->values(tile_m, StageRole::stage1), (std::vector<AxisValue>{64}));
  EXPECT_EQ(o->values(tile_m, StageRole::stage2), (std::vector<AxisValue>{32}));
  EXPECT_EQ(o->values(tile_m), (std::vector<AxisValue>{32}));
  const Space sp = enumerate_space(*find_target("sm_90a"), mixtral(), *SpaceOptions::parse(
                                       "small;atom=wgmma_m64k16_f32_bf16;moe1.wgmma_tile_m=192;moe1.wgmma_warps=12x1;"
                                       "moe2.wgmma_tile_m=128;moe2.wgmma_warps=8x1"));
  std::set<std::pair<StageRole, int>> seen;
  for (const Variant& v : sp.legal) seen.insert({v.role, v.get("tile_m")});
  EXPECT_EQ(seen, (std::set<std::pair<StageRole, int>>{{StageRole::stage1, 192}, {StageRole::stage2, 128}}));
  struct Bad {
    const char* text;
    const char* says;
  };
  for (const Bad& b : {Bad{"moe3.tile_m=64", "not moe1 or moe2"}, Bad{"moe1.kind=moe2", "without a kind"},
                       Bad{"moe1.atom=mma_m16n8k16_f32_bf16", "without a kind"}, Bad{"moe1.tile_q=1", "unknown axis 'tile_q'"},
                       Bad{"moe2.tile_m=0", ""}, Bad{".tile_m=64", "not moe1 or moe2"}}) {
    auto r = SpaceOptions::parse(b.text);
    ASSERT_FALSE(r) << b.text;
    EXPECT_NE(r.error().message.find(b.says), std::string::npos) << b.text << ": " << r.error().message;
  }
}

// wgmma_weights: a producer warpgroup reads tiled weights by default and,
// where asked, the plain ones through a tensor map ("_map"); blocks without a
// producer read plain ones whatever it says, and the other families have no mapped form.
TEST(Space, WgmmaWeightsAxisOffersMappedToProducerBlocksOnly) {
  auto o = SpaceOptions::parse("small;atom=wgmma_m64k16_f32_bf16;wgmma_weights=tiled,mapped;wgmma_producer=off,on");
  ASSERT_TRUE(o) << o.error().describe();
  const Space sp = enumerate_space(*find_target("sm_90a"), mixtral(), *o);
  std::set<std::pair<bool, WeightLayout>> seen;
  for (const Variant& v : sp.legal) {
    const auto l = WeightLayout(v.get("layout"));
    seen.insert({v.get("warp_specialized") != 0, l});
    EXPECT_EQ(l == WeightLayout::mapped, v.name().find("_map") != std::string::npos) << v.name();
  }
  EXPECT_EQ(seen, (std::set<std::pair<bool, WeightLayout>>{
                      {false, WeightLayout::plain}, {true, WeightLayout::tiled}, {true, WeightLayout::mapped}}));
  for (const Variant& v : enumerate_space(*find_target("sm_90a"), mixtral(), SpaceOptions{}).legal)
    EXPECT_NE(WeightLayout(v.get("layout")), WeightLayout::mapped) << v.name() << ": mapped is opt-in until measured";
  Variant mma = Variant::of(*find_target("sm_90a"), StageRole::stage1, *find_atom("mma_m16n8k16_f32_bf16"));
  mma.set("layout", int(WeightLayout::mapped));
  const auto why = why_illegal(mma, mixtral());
  ASSERT_TRUE(why) << mma.name();
  EXPECT_NE(why->find("mapped weight layout feeds a wgmma producer warpgroup"), std::string::npos) << *why;
}

TEST(Space, NarrowingShrinksAndWideningGrows) {
  const Target& t = *find_target("gfx942");
  auto def = enumerate_space(t, mixtral(), SpaceOptions{}).legal.size();
  auto small = enumerate_space(t, mixtral(), SpaceOptions::small()).legal.size();
  auto wide = enumerate_space(t, mixtral(), SpaceOptions::wide()).legal.size();
  EXPECT_LT(small, def);
  EXPECT_GT(wide, def);
}

TEST(Variant, NameAndJsonRoundTrip) {
  auto v = *default_variant(*find_target("gfx942"), mixtral(), StageRole::stage1);
  EXPECT_EQ(v.name(), "ft_gfx942_moe1_bf16_m64n64k32_w2x2_mfma16x16x16_s2");
  v.role = StageRole::stage2;
  v.set("split_k", 2).set("weight_in_stage1", 1).set("layout", int(WeightLayout::shuffled));
  EXPECT_EQ(v.name(), "ft_gfx942_moe2_bf16_m64n64k32_w2x2_mfma16x16x16_s2_atomic_sk2_norw_shuf");
  auto back = Variant::from_json(v.to_json());
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->name(), v.name());
  EXPECT_FALSE(Variant::from_json(nlohmann::json{{"target", "gfx1"}}));
}

TEST(Variant, LdsMatchesTemplateFormula) {
  // (tile_m + 2 tile_n) rows x (tile_k + 8) x 2 bytes x stages, as ft::TiledGemm computes.
  auto v = *default_variant(*find_target("sm_90a"), mixtral(), StageRole::stage1);
  EXPECT_EQ(v.lds_bytes(), 2 * (64 + 2 * 64) * (32 + 8) * 2);
  EXPECT_EQ(v.threads(), 128);
}

TEST(Launch, PaddedRowsBound) {
  Problem p = mixtral();
  EXPECT_EQ(max_padded_rows(p, 1, 64), 128);        // 2 pairs, 2 experts at most, one block each
  EXPECT_EQ(max_padded_rows(p, 1000, 64), 2560);  // 2000 + 8 * 63 = 2504, rounded up to 64
  auto v = *default_variant(*find_target("gfx942"), p, StageRole::stage2);
  LaunchShape s = stage_launch(v, p, 1, 64);
  EXPECT_EQ(s.grid_x, 2);
  EXPECT_EQ(s.grid_y, 4096 / 64);
  EXPECT_EQ(s.block, 256);
}

// A persistent stage launches ceil(tiles / tiles_per_block) blocks along x,
// which ft::for_each_tile recomputes from MoeArgs to stride over the tiles.
TEST(Launch, PersistentGridCoversEveryTile) {
  Problem p = mixtral();
  Variant v = hopper_stage2();
  v.set("split_k", 2).set("warp_specialized", 1).set("layout", int(WeightLayout::tiled));
  const LaunchShape one = stage_launch(v, p, 4096, 128);
  EXPECT_EQ(one.grid_z, 2);
  v.set("tiles_per_block", 8);
  ASSERT_FALSE(why_illegal(v, p)) << v.name();
  EXPECT_TRUE(v.name().ends_with("_tiled_ws_t8")) << v.name();
  const LaunchShape s = stage_launch(v, p, 4096, 128);
  const long long tiles = (long long)one.grid_x * one.grid_y * one.grid_z;
  EXPECT_EQ(s.grid_x, (tiles + 7) / 8);
  EXPECT_EQ(s.grid_y, 1);
  EXPECT_EQ(s.grid_z, 1);
  EXPECT_EQ(s.block, one.block);
  auto back = Variant::from_json(v.to_json());
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->get("tiles_per_block"), 8);
  nlohmann::json old_record = v.to_json();
  old_record.erase("tiles_per_block");  // written before the field existed
  old_record.erase("pingpong");         // (and before the ping-pong axis of persistent blocks)
  old_record.erase("rebalance");        // (and before the register rebalance axis)
  old_record.erase("dynamic_tiles");    // (and before the dynamic tile walks)
  auto old = Variant::from_json(old_record);
  ASSERT_TRUE(old) << old.error().describe();
  EXPECT_EQ(old->get("tiles_per_block"), 1);
  old_record["tiles_per_block"] = 0;
  EXPECT_FALSE(Variant::from_json(old_record));

  // Only a producer warpgroup's ring can run across tiles.
  v.set("warp_specialized", 0).set("layout", int(WeightLayout::plain));
  auto why = why_illegal(v, p);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("need a producer warpgroup"), std::string::npos) << *why;
  auto o = SpaceOptions::parse("wgmma_tiles=1,8");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->values(wgmma_family().axes()[wgmma_family().index_of("tiles_per_block")]), (std::vector<AxisValue>{1, 8}));
  EXPECT_FALSE(SpaceOptions::parse("wgmma_tiles=0"));
}

}  // namespace
}  // namespace ft
