// The emulator catches what compiles cleanly but computes wrongly: a broken
// atom operand layout and a wrong gather row each fail whole-layer
// verification, while the unmutated kernel of the same configuration passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>

#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

LayerPlan mutant_plan(const Target& t) {
  Variant v = Variant::of(t, StageRole::stage1, *find_atom("mfma_f32_16x16x16_bf16"));
  v.set("tile_m", 32);
  v.set("tile_n", 64);
  v.set("tile_k", 32);
  v.set("warps_m", 2).set("warps_n", 2);
  v.set("stages", 2);
  LayerPlan plan;
  plan.stage1 = v;
  plan.stage1.role = StageRole::stage1;
  plan.stage2 = v;
  plan.stage2.role = StageRole::stage2;
  return plan;
}

Result<Comparison> run_with_stage1(const char* stage1_entry, int tokens) {
  const Target& t = target("gfx942");
  TargetBench& bench = TargetBench::of(t);
  const LayerPlan plan = mutant_plan(t);
  RoleKernels k = FT_TRY(bench.kernels(plan));
  k.of(Role::stage1) = FT_TRY(bench.entry(unit_from_file("mutants.cpp", {"ft_control_moe1", "ft_mutant_broken_atom_moe1",
                                                               "ft_mutant_wrong_row_moe1"}),
                                stage1_entry));
  const Case& c = case_for(DType::bf16, tokens);
  DeviceWorkload dw = FT_TRY(DeviceWorkload::upload(bench.device(), c.workload));
  return verify_layer(dw, k, plan, c.reference[0]);
}

TEST(EmuMutation, UnmutatedControlPasses) {
  for (int tokens : {7, 33}) {
    auto c = run_with_stage1("ft_control_moe1", tokens);
    ASSERT_TRUE(c) << c.error().describe();
    EXPECT_TRUE(c->passed) << c->summary();
  }
}

TEST(EmuMutation, BrokenAtomLayoutFailsVerification) {
  for (int tokens : {1, 7, 33}) {
    auto c = run_with_stage1("ft_mutant_broken_atom_moe1", tokens);
    ASSERT_TRUE(c) << c.error().describe();
    EXPECT_FALSE(c->passed) << "T=" << tokens << ": a broken A layout passed: " << c->summary();
    EXPECT_GT(c->rel_l2, 0.1) << c->summary();
  }
}

TEST(EmuMutation, WrongGatherRowFailsVerification) {
  for (int tokens : {7, 33}) {
    auto c = run_with_stage1("ft_mutant_wrong_row_moe1", tokens);
    ASSERT_TRUE(c) << c.error().describe();
    EXPECT_FALSE(c->passed) << "T=" << tokens << ": a wrong gather row passed: " << c->summary();
    EXPECT_GT(c->rel_l2, 0.1) << c->summary();
  }
}

// The launch rules are checked like the kernels: the layer program's steps for
// a persistent stage pass; the same steps with the stage's grid computed the
// old way (one tile per block: rows / tile_m x N / tile_n x split_k, the rule
// exports once used) fail, and so do stage tiles that straddle two experts
// (a row block of the larger tile_m instead of a multiple of both).
struct LaunchMutant {
  const char* what;
  std::function<void(LayerProgram&, const LayerPlan&, const Problem&)> edit;  // null: the program as built
};

Result<Comparison> run_program(const LayerPlan& plan, int tokens, const LaunchMutant& m) {
  const Target& t = *plan.stage1.target;
  TargetBench& bench = TargetBench::of(t);
  RoleKernels k = FT_TRY(bench.kernels(plan));
  const Case& c = case_for(plan.stage1.dtype, tokens);
  DeviceWorkload dw = FT_TRY(DeviceWorkload::upload(bench.device(), c.workload));
  LayerProgram prog = FT_TRY(build_program(plan.recipe(c.workload.problem), tokens));
  if (m.edit) m.edit(prog, plan, c.workload.problem);
  (void)FT_TRY(dw.weights(1, plan.stage1.contract().weights));
  (void)FT_TRY(dw.weights(2, plan.stage2.contract().weights));
  Device& d = bench.device();
  const std::size_t T = std::size_t(tokens), H = std::size_t(c.workload.problem.hidden);
  FT_CHECK(d.memset_u32(dw.y.ptr(), 0xffffffffu, T * H / 2));
  FT_CHECK(d.memset_u32(dw.y_acc.ptr(), 0xffffffffu, dw.y_acc.bytes() / 4));
  const auto fns = FT_TRY(bind(prog, k));
  FT_CHECK(prepare(d, prog, fns));
  FT_CHECK(execute(d, prog, fns, dw.table(), {}));
  std::vector<std::uint16_t> y(T * H);
  FT_CHECK(d.copy_to_host(y.data(), dw.y.ptr(), y.size() * 2));
  return compare_output(y, c.reference[plan.stage1.contract().weight_in_stage1 ? 1 : 0].y, plan.stage1.dtype);
}

TEST(EmuMutation, LaunchRulesOfTheLayerProgram) {
  const Target& t = target("sm_90a");
  // A persistent, warp-specialised plan of the emulator slice (three tiles per block).
  const auto plans = plans_for(t);
  auto it = std::find_if(plans.begin(), plans.end(), [](const LayerPlan& p) { return p.stage2.get("tiles_per_block") > 1; });
  ASSERT_NE(it, plans.end());
  const LayerPlan persistent = *it;
  const LaunchMutant as_built{"as built", nullptr};
  const LaunchMutant old_persistent_grid{"persistent grid computed the old way", [](LayerProgram& p, const LayerPlan& plan,
                                                                                   const Problem& problem) {
    Step& s = p.steps[p.index_of("stage2")];
    s.shape.grid_x = int(p.max_padded_rows / plan.stage2.get("tile_m"));
    s.shape.grid_y = problem.hidden / plan.stage2.get("tile_n");
    s.shape.grid_z = plan.stage2.get("split_k");
  }};
  for (int tokens : {7, 33}) {
    auto good = run_program(persistent, tokens, as_built);
    ASSERT_TRUE(good) << good.error().describe();
    EXPECT_TRUE(good->passed) << "T=" << tokens << ": " << good->summary();
    auto bad = run_program(persistent, tokens, old_persistent_grid);
    ASSERT_TRUE(bad) << bad.error().describe();
    EXPECT_FALSE(bad->passed) << "T=" << tokens << ": the old persistent grid passed: " << bad->summary();
  }

  // Stage tiles of 32 and 64 rows with a row block of 32 (the smaller tile:
  // stage 2's 64-row tiles straddle two experts' runs).
  LayerPlan mixed = mutant_plan(target("gfx942"));
  mixed.stage2.set("tile_m", 64);
  const LaunchMutant straddling{"row block below a tile", [](LayerProgram& p, const LayerPlan&, const Problem& problem) {
    const int block = 32;
    p.align_block = block;
    for (Step& s : p.steps) {
      if (s.op != Step::Op::launch) continue;
      s.args.align_block = block;
      s.args.max_padded_rows = int(max_padded_rows(problem, s.args.tokens, block));
      if (s.role == Role::stage1) s.shape.grid_x = s.args.max_padded_rows / 32;
      if (s.role == Role::stage2) s.shape.grid_x = s.args.max_padded_rows / 64;
    }
  }};
  auto good = run_program(mixed, 33, as_built);
  ASSERT_TRUE(good) << good.error().describe();
  EXPECT_TRUE(good->passed) << good->summary();
  auto bad = run_program(mixed, 33, straddling);
  ASSERT_TRUE(bad) << bad.error().describe();
  EXPECT_FALSE(bad->passed) << "tiles straddling two experts passed: " << bad->summary();
}

}  // namespace
}  // namespace ft::emu::test
