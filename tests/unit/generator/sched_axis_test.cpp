// The wgmma family's wgmma_sched axis (generator/families/wgmma.cpp, the kernels'
// Cfg::dynamic_tiles, templates/ft/tile_order.hpp for_each_ticket): where it
// exists (persistent producer blocks), its name, JSON, Config, shared memory,
// --space spelling, the stage contract, and the layer program it asks for (a
// clear_tile_tickets step and the 8-byte tile_tickets workspace, only then).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "generator/space.hpp"
#include "generator/variant.hpp"
#include "layer/program.hpp"

namespace ft {
namespace {

Problem mixtral() { return problem_from_preset("mixtral-8x7b").value(); }

Variant producer_stage(StageRole role, int tiles, bool dynamic) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("wgmma_m64k16_f32_bf16"));
  v.set("tile_m", 128).set("tile_n", 128).set("tile_k", 64).set("warps_m", 8).set("warps_n", 1).set("stages", 4);
  v.set("warp_specialized", 1).set("layout", int(WeightLayout::tiled)).set("tiles_per_block", tiles);
  if (dynamic) v.set("dynamic_tiles", 1);
  return v;
}

TEST(SchedAxis, OnlyInPersistentProducerBlocks) {
  // One tile per block: the axis is absent (name, JSON and Config as before it).
  const Variant one = producer_stage(StageRole::stage1, 1, false);
  EXPECT_FALSE(one.to_json().contains("dynamic_tiles")) << one.name();
  EXPECT_EQ(emit_variant(one).text.find("dynamic_tiles"), std::string::npos);
  EXPECT_FALSE(one.contract().tile_tickets);
  // A static persistent block keeps its name; the Config says false.
  const Variant fixed = producer_stage(StageRole::stage1, 8, false);
  EXPECT_EQ(fixed.name(), "ft_sm_90a_moe1_bf16_m128n128k64_w8x1_wgmma_s4_tiled_ws_t8");
  EXPECT_EQ(fixed.to_json().at("dynamic_tiles"), false);
  EXPECT_NE(emit_variant(fixed).text.find("static constexpr bool dynamic_tiles = false;"), std::string::npos);
  EXPECT_FALSE(fixed.contract().tile_tickets);
  const Variant dyn = producer_stage(StageRole::stage1, 8, true);
  EXPECT_EQ(dyn.name(), "ft_sm_90a_moe1_bf16_m128n128k64_w8x1_wgmma_s4_tiled_ws_t8_dyn");
  EXPECT_NE(emit_variant(dyn).text.find("static constexpr bool dynamic_tiles = true;"), std::string::npos);
  EXPECT_TRUE(dyn.contract().tile_tickets);
  auto back = Variant::from_json(dyn.to_json());
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(*back, dyn);
  // A record with the key where the axis is absent is refused.
  nlohmann::json j = one.to_json();
  j["dynamic_tiles"] = true;
  EXPECT_FALSE(Variant::from_json(j));
  // The ticket ring: 4 slots of two mbarriers and a ticket, 80 bytes more than the static block.
  EXPECT_EQ(dyn.lds_bytes(), fixed.lds_bytes() + 80);
  EXPECT_FALSE(why_illegal(dyn, mixtral())) << *why_illegal(dyn, mixtral());
}

TEST(SchedAxis, DynamicByDefaultBothThroughSpace) {
  const Target& t = *find_target("sm_90a");
  auto count = [&](const SpaceOptions& options, int& persistent) {
    int dynamic = 0;
    persistent = 0;
    for (const Variant& v : enumerate_space(t, mixtral(), options).legal) {
      if (!v.has("dynamic_tiles") || v.get("tiles_per_block") < 2 || !v.get("warp_specialized")) continue;
      ++persistent;
      dynamic += v.contract().tile_tickets;
    }
    return dynamic;
  };
  int persistent = 0;
  EXPECT_EQ(count(SpaceOptions{}, persistent), persistent);  // the default: every persistent producer block dynamic
  EXPECT_GT(persistent, 0);
  auto fixed = SpaceOptions::parse("wgmma_sched=static");
  ASSERT_TRUE(fixed) << fixed.error().describe();
  EXPECT_EQ(count(*fixed, persistent), 0);
  EXPECT_GT(persistent, 0);
  auto both = SpaceOptions::parse("wgmma_sched=static,dynamic;wgmma_tiles=8;wgmma_producer=on;wgmma_warps=8x1");
  ASSERT_TRUE(both) << both.error().describe();
  const int dynamic = count(*both, persistent);
  EXPECT_GT(dynamic, 0);
  EXPECT_LE(2 * dynamic, persistent);  // at most one dynamic twin per static block
  EXPECT_FALSE(SpaceOptions::parse("wgmma_sched=sometimes"));
}

TEST(SchedAxis, ProgramClearsTheTicketsOnlyForDynamicStages) {
  const Problem p = mixtral();
  const Target& t = *find_target("sm_90a");
  for (bool dynamic : {false, true}) {
    const LayerRecipe r{&t, p, {producer_stage(StageRole::stage1, 8, dynamic), producer_stage(StageRole::stage2, 8, false)}};
    auto prog = build_program(r, 4096);
    ASSERT_TRUE(prog) << prog.error().describe();
    const Step* clear = prog->find("clear_tile_tickets");
    EXPECT_EQ(prog->bytes[std::size_t(Buf::tile_tickets)], dynamic ? 8u : 0u);
    ASSERT_EQ(clear != nullptr, dynamic);
    if (!dynamic) continue;
    EXPECT_EQ(clear->op, Step::Op::memset_u32);
    EXPECT_EQ(clear->buffer, Buf::tile_tickets);
    EXPECT_EQ(clear->value, 0u);
    EXPECT_EQ(clear->count, 2u);
    // Before the stages it resets.
    const auto at = [&](std::string_view name) {
      for (std::size_t i = 0; i < prog->steps.size(); ++i)
        if (prog->steps[i].name == name) return i;
      return prog->steps.size();
    };
    EXPECT_LT(at("clear_tile_tickets"), at("stage1"));
    EXPECT_TRUE(is_workspace(Buf::tile_tickets));
  }
}

}  // namespace
}  // namespace ft
