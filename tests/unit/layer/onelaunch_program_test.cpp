// The layer program of the one-launch family (layer/program.cpp,
// build_one_launch): a clear of y_acc's head and one launch -- the layer in
// the moe2 unit with kFlagOneLaunchLayer, a stage alone in its own unit --,
// its buffers (no sorted_ids, block_experts or padded_rows: the kernel aligns
// in LDS), the pairs it refuses (anything but twins) and the token counts
// whose route tables exceed the target's LDS.
#include <gtest/gtest.h>

#include "generator/atoms.hpp"
#include "generator/families/families.hpp"
#include "layer/operation.hpp"
#include "layer/program.hpp"

namespace ft {
namespace {

Problem qwen() { return *problem_from_preset("qwen3-30b"); }  // E 128, H 2048, I 768, top-8

Variant onelaunch(StageRole role, int tile_n = 16) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("mma_m16n8k16_f32_bf16"), &onelaunch_family());
  v.set("ol_blocks", 264).set("tile_m", 16).set("tile_n", tile_n).set("tile_k", 64).set("warps_m", 1).set("warps_n", 2);
  return v;
}

Variant tiled(StageRole role) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("mma_m16n8k16_f32_bf16"));
  v.set("tile_m", 16).set("tile_n", 64).set("tile_k", 64).set("warps_m", 1).set("warps_n", 4);
  if (role == StageRole::stage2) v.set("reduce", int(Reduce::partials_y));
  return v;
}

std::vector<std::string> step_names(const LayerProgram& p) {
  std::vector<std::string> out;
  for (const Step& s : p.steps) out.push_back(s.name);
  return out;
}

std::uint64_t bytes(const LayerProgram& p, Buf b) { return p.bytes[std::size_t(b)]; }

// {name, stage 1, stage 2, T, step names, the launch's flags}
struct FormCase {
  const char* name;
  bool s1, s2;
  int tokens;
  std::vector<std::string> steps;
  int flags;
};

class OneLaunchProgram : public ::testing::TestWithParam<FormCase> {};

TEST_P(OneLaunchProgram, IsAClearAndOneLaunch) {
  const FormCase& c = GetParam();
  const Problem p = qwen();
  const LayerRecipe r{find_target("sm_90a"), p, stage_list(c.s1 ? std::optional(onelaunch(StageRole::stage1)) : std::nullopt,
                                                           c.s2 ? std::optional(onelaunch(StageRole::stage2)) : std::nullopt)};
  auto prog = build_program(r, c.tokens);
  ASSERT_TRUE(prog) << prog.error().describe();
  EXPECT_EQ(step_names(*prog), c.steps);
  EXPECT_EQ(prog->align_block, 16);
  EXPECT_EQ(prog->max_padded_rows, max_padded_rows(p, c.tokens, 16));
  const long long row_blocks = prog->max_padded_rows / 16;
  const std::uint64_t head = std::uint64_t(onelaunch_head_words(c.tokens, p.hidden, row_blocks));
  const Step& clear = prog->steps[0];
  EXPECT_EQ(clear.op, Step::Op::memset_u32);
  EXPECT_EQ(clear.buffer, Buf::y_acc);
  EXPECT_EQ(clear.count, head);
  EXPECT_EQ(clear.value, 0u);
  const Step& run = prog->steps[1];
  const Variant& v = *r.stage(c.s2 ? StageRole::stage2 : StageRole::stage1);
  EXPECT_EQ(run.symbol, v.name());
  EXPECT_EQ(run.role, c.s2 ? Role::stage2 : Role::stage1);
  EXPECT_EQ(run.args.flags, c.flags);
  EXPECT_EQ(run.args.max_padded_rows, prog->max_padded_rows);
  EXPECT_EQ(run.args.align_block, 16);
  const long long items = row_blocks * (p.inter / 16 + p.hidden / 32);
  EXPECT_EQ(run.shape.grid_x, std::min<long long>(264, items));
  EXPECT_EQ(run.shape.grid_y * run.shape.grid_z, 1);
  EXPECT_EQ(run.shape.block, 64);
  EXPECT_EQ(run.shape.lds_bytes, v.lds_bytes() + onelaunch_route_bytes(prog->max_padded_rows, 16, p.experts));
  // No align buffers; the head, then (with stage 2) a fp32 row per pair.
  for (Buf b : {Buf::sorted_ids, Buf::block_experts, Buf::padded_rows}) EXPECT_EQ(bytes(*prog, b), 0u) << to_string(b);
  const std::uint64_t T = std::uint64_t(c.tokens), k = 8, H = 2048, I = 768;
  EXPECT_EQ(bytes(*prog, Buf::y_acc), (head + (c.s2 ? T * k * H : 0)) * 4);
  EXPECT_LE((long long)bytes(*prog, Buf::y_acc), y_acc_capacity(p, c.tokens));
  EXPECT_EQ(bytes(*prog, Buf::y), c.s2 ? T * H * 2 : 0);
  EXPECT_EQ(bytes(*prog, Buf::inter), T * k * I * 2);
  EXPECT_EQ(bytes(*prog, Buf::x), T * H * 2);
  EXPECT_EQ(bytes(*prog, Buf::bad_ids), 4u);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, OneLaunchProgram,
    ::testing::Values(FormCase{"layer_T1", true, true, 1, {"clear_y_acc", "stage2"}, kFlagOneLaunchLayer},
                      FormCase{"layer_T16", true, true, 16, {"clear_y_acc", "stage2"}, kFlagOneLaunchLayer},
                      FormCase{"stage1_T7", true, false, 7, {"clear_y_acc", "stage1"}, 0},
                      FormCase{"stage2_T7", false, true, 7, {"clear_y_acc", "stage2"}, 0}),
    [](const ::testing::TestParamInfo<FormCase>& info) { return std::string(info.param.name); });

// A layer recipe's role kernels are its two stages in role order, run by the
// steps of their launch roles; the one-launch layer launches only its moe2
// unit, so the export ships (and the runtime loads) the stage 1 twin nowhere.
TEST(OneLaunchProgram, RoleKernelsAreTheStagesAndOnlyTheLaunchedShip) {
  const Problem p = qwen();
  for (const bool one_launch : {false, true}) {
    SCOPED_TRACE(one_launch ? "one-launch" : "tiled");
    const Variant s1 = one_launch ? onelaunch(StageRole::stage1) : tiled(StageRole::stage1);
    const Variant s2 = one_launch ? onelaunch(StageRole::stage2) : tiled(StageRole::stage2);
    const LayerRecipe r{find_target("sm_90a"), p, {s1, s2}};
    EXPECT_EQ(&op::operation_of(r), &op::moe_forward());
    const std::vector<op::RoleKernel> k = op::role_kernels(r);
    ASSERT_EQ(k.size(), 2u);
    EXPECT_EQ(k[0].launch, Role::stage1);
    EXPECT_EQ(k[0].symbol, s1.name());
    EXPECT_EQ(k[0].lds_bytes, s1.lds_limit());
    EXPECT_EQ(k[1].launch, Role::stage2);
    EXPECT_EQ(k[1].symbol, s2.name());
    auto prog = build_program(r, 7);
    ASSERT_TRUE(prog) << prog.error().describe();
    EXPECT_EQ(launches(*prog, k[0].symbol), !one_launch);
    EXPECT_TRUE(launches(*prog, k[1].symbol));
  }
}

// A one-launch stage pairs with its twin only: not with another family's
// stage, not with a one-launch stage of other values.
TEST(OneLaunchProgram, PairsOnlyTwins) {
  const Target& t = *find_target("sm_90a");
  const Problem p = qwen();
  EXPECT_TRUE(pair_fits(t, p, onelaunch(StageRole::stage1), onelaunch(StageRole::stage2)));
  EXPECT_TRUE(pair_fits(t, p, tiled(StageRole::stage1), tiled(StageRole::stage2)));
  const std::pair<Variant, Variant> mixed[] = {{onelaunch(StageRole::stage1), tiled(StageRole::stage2)},
                                               {tiled(StageRole::stage1), onelaunch(StageRole::stage2)},
                                               {onelaunch(StageRole::stage1, 16), onelaunch(StageRole::stage2, 32)}};
  for (const auto& [s1, s2] : mixed) {
    const Status st = pair_fits(t, p, s1, s2);
    ASSERT_FALSE(st) << s1.name() << " + " << s2.name();
    EXPECT_NE(st.error().message.find("pairs only with its twin"), std::string::npos) << st.error().message;
    EXPECT_FALSE(build_program(LayerRecipe{&t, p, {s1, s2}}, 1));
  }
}

// The route tables grow with T (sorted_ids' rows in LDS): the layer is
// refused, with its LDS named, where they no longer fit.
TEST(OneLaunchProgram, RefusesTokenCountsWhoseTablesExceedTheLds) {
  const Target& t = *find_target("sm_90a");
  const LayerRecipe r{&t, qwen(), {onelaunch(StageRole::stage1), onelaunch(StageRole::stage2)}};
  ASSERT_TRUE(build_program(r, 64));
  auto big = build_program(r, 8192);
  ASSERT_FALSE(big);
  EXPECT_NE(big.error().message.find("LDS use"), std::string::npos) << big.error().message;
  EXPECT_NE(big.error().message.find("T=8192"), std::string::npos) << big.error().message;
}

}  // namespace
}  // namespace ft
