// fp8 layers with a static intermediate scale (Scales::static_tensor, "static"):
// the problem's spelling and key, the variants' name token and the axes they
// lack (inter_store: such a stage 1 always quantises on store with the scale),
// the legality (stage 2 reads it as row scales in the wgmma family; a producer
// warpgroup's consumers may quantise on store, no barrier needed), and the
// layer program: no quantise_inter step, no bf16 intermediate, the inter_scale
// input [1] beside x_scale; the other modes' programs unchanged.
#include <algorithm>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/atoms.hpp"
#include "generator/families/families.hpp"
#include "generator/space.hpp"
#include "layer/program.hpp"
#include "tests/unit/generator/legality.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft {
namespace {

Problem fp8_problem(Scales scales) { return test::fp8_mixtral(scales); }

Variant wgmma_fp8(StageRole role, Scales scales, bool producer = false, bool row = true) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("wgmma_m64k32_f32_e4m3"));
  v.set("tile_m", 64).set("tile_n", 128).set("tile_k", 128).set("warps_m", 4).set("warps_n", 1).set("stages", 4);
  v.set("scales", int(scales)).set("promote", 0);
  if (producer) v.set("warp_specialized", 1).set("layout", int(WeightLayout::tiled));
  if (role == StageRole::stage2 && row) v.set("inter_scales", int(InterScales::row));
  return v;
}

std::vector<std::string> step_names(const LayerProgram& p) {
  std::vector<std::string> out;
  for (const Step& s : p.steps) out.push_back(s.name);
  return out;
}

TEST(StaticScales, TheProblemSpellsItStaticAndKeepsTheOtherKeys) {
  EXPECT_EQ(parse_scales("static").value(), Scales::static_tensor);
  EXPECT_EQ(to_string(Scales::static_tensor), "static");
  EXPECT_EQ(fp8_problem(Scales::static_tensor).key(), "moe_e8_h4096_i14336_k2_e4m3:static_swiglu_uniform");
  EXPECT_EQ(fp8_problem(Scales::per_tensor).key(), "moe_e8_h4096_i14336_k2_e4m3:per-tensor_swiglu_uniform");
  const auto bad = parse_scales("static-tensor");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("static"), std::string::npos) << bad.error().message;
}

TEST(StaticScales, VariantsCarryTheTokenAndNoInterStore) {
  const Variant s1 = wgmma_fp8(StageRole::stage1, Scales::static_tensor);
  EXPECT_NE(s1.name().find("_static"), std::string::npos) << s1.name();
  EXPECT_EQ(s1.name().find("_qstore"), std::string::npos) << s1.name();
  const nlohmann::json j = s1.to_json();
  EXPECT_EQ(j.at("scales"), "static_tensor");
  EXPECT_FALSE(j.contains("inter_store")) << j.dump();
  auto back = Variant::from_json(j);
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->name(), s1.name());
  // A per-tensor variant's name is the one it always had.
  EXPECT_EQ(wgmma_fp8(StageRole::stage1, Scales::per_tensor).name().find("_static"), std::string::npos);
  // The default space of a static problem: no stage 1 with inter_store, no stage 2 on group scales.
  const Problem p = fp8_problem(Scales::static_tensor);
  const Space space = enumerate_space(*find_target("sm_90a"), p, SpaceOptions{});
  ASSERT_FALSE(space.legal.empty());
  for (const Variant& v : space.legal) {
    EXPECT_NE(v.name().find("_static"), std::string::npos) << v.name();
    EXPECT_FALSE(fp8::quantise_on_store(v)) << v.name();
    if (v.role == StageRole::stage2 && v.has("inter_scales")) {
      EXPECT_TRUE(fp8::inter_row_scales(v)) << v.name();
    }
  }
}

struct LegalityCase {
  const char* label;
  StageRole role;
  bool producer, row;
  const char* rejection;  // nullptr: legal
};

class StaticScalesLegality : public ::testing::TestWithParam<LegalityCase> {};

TEST_P(StaticScalesLegality, FollowsTheStaticScale) {
  const LegalityCase& c = GetParam();
  test::expect_legality(wgmma_fp8(c.role, Scales::static_tensor, c.producer, c.row), fp8_problem(Scales::static_tensor),
                        c.rejection);
}

INSTANTIATE_TEST_SUITE_P(
    Wgmma, StaticScalesLegality,
    ::testing::Values(LegalityCase{"s1_ring", StageRole::stage1, false, false, nullptr},
                      // No block barrier in the fixed-scale store: a producer warpgroup's consumers store too.
                      LegalityCase{"s1_producer", StageRole::stage1, true, false, nullptr},
                      LegalityCase{"s2_row", StageRole::stage2, false, true, nullptr},
                      LegalityCase{"s2_producer_row", StageRole::stage2, true, true, nullptr},
                      LegalityCase{"s2_group", StageRole::stage2, false, false, "inter_scales=row"}),
    [](const ::testing::TestParamInfo<LegalityCase>& info) { return std::string(info.param.label); });

// The static layer: quantise_x, align, stage 1, stage 2 (no quantise_inter
// between), no bf16 intermediate, inter_scale [1] read; per-tensor with the
// same stages (their inter_store bf16) keeps its quantise_inter and inter.
TEST(StaticScales, TheProgramHasNoQuantiseInterAndNoBf16Intermediate) {
  const Target& t = *find_target("sm_90a");
  const int T = 64;
  auto program = [&](Scales s) {
    const Problem p = fp8_problem(s);
    return build_program({&t, p, {wgmma_fp8(StageRole::stage1, s), wgmma_fp8(StageRole::stage2, s)}}, T);
  };
  auto fixed = program(Scales::static_tensor);
  ASSERT_TRUE(fixed) << fixed.error().describe();
  EXPECT_EQ(step_names(*fixed), (std::vector<std::string>{"clear_y_acc", "quantise_x", "align", "stage1", "stage2", "reduce"}));
  const Problem p = fp8_problem(Scales::static_tensor);
  const std::uint64_t pairs = std::uint64_t(T) * p.topk;
  EXPECT_EQ(fixed->bytes[std::size_t(Buf::inter)], 0u);
  EXPECT_EQ(fixed->bytes[std::size_t(Buf::inter_scale)], 4u);
  EXPECT_EQ(fixed->bytes[std::size_t(Buf::x_scale)], 4u);
  EXPECT_EQ(fixed->bytes[std::size_t(Buf::inter_q)], pairs * std::uint64_t(p.inter));
  EXPECT_EQ(fixed->bytes[std::size_t(Buf::inter_scales)], pairs * std::uint64_t(p.inter / kScaleGroup) * 4);
  EXPECT_FALSE(needs_quantise_inter(wgmma_fp8(StageRole::stage1, Scales::static_tensor)));
  EXPECT_FALSE(is_workspace(Buf::inter_scale)) << "the caller's input";

  auto dynamic = program(Scales::per_tensor);
  ASSERT_TRUE(dynamic) << dynamic.error().describe();
  EXPECT_EQ(step_names(*dynamic),
            (std::vector<std::string>{"clear_y_acc", "quantise_x", "align", "stage1", "quantise_inter", "stage2", "reduce"}));
  EXPECT_EQ(dynamic->bytes[std::size_t(Buf::inter)], pairs * std::uint64_t(p.inter) * 2);
  EXPECT_EQ(dynamic->bytes[std::size_t(Buf::inter_scale)], 0u);

  // A stage-2 program alone reads the intermediate it is given, not the scale.
  auto second = build_program({&t, p, {wgmma_fp8(StageRole::stage2, Scales::static_tensor)}}, T);
  ASSERT_TRUE(second) << second.error().describe();
  EXPECT_EQ(second->bytes[std::size_t(Buf::inter_scale)], 0u);
  EXPECT_EQ(second->find("quantise_inter"), nullptr);
}

}  // namespace
}  // namespace ft
