// Ping-pong consumers (templates/ft/wgmma_gemm.hpp, Cfg::pingpong, docs/HOPPER.md):
// layers whose stages run in persistent producer blocks where the two
// consumer warpgroups take whole tiles in turn, against the CPU reference at
// T = 1, 7, 33 (ragged experts, one with no tokens, T not a multiple of the
// tile): bf16 with one and two 64-row wgmma blocks per warpgroup, routed
// weight in either stage, atomic and 16-bit partial sums, split-K; fp8
// per-tensor with fast accumulation and stage 2 on row scales. The mutant,
// the turn hand-off dropped (the warpgroup of the next tile waits on the ring
// at once, a phase early: parity cannot tell the phases apart), must fail.
#include <gtest/gtest.h>

#include <string>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "templates/ft/moe_inter_scales.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

using Stage = PersistentStage;  // 8x1 warps: two consumer warpgroups

Variant pingpong_variant(StageRole role, DType dtype, const Stage& s, bool weight_in_stage1) {
  return persistent_stage(role, dtype, s, weight_in_stage1).set("pingpong", 1);
}

LayerPlan pingpong_plan(DType dtype, const Stage& s1, const Stage& s2, bool weight_in_stage1 = false) {
  return {pingpong_variant(StageRole::stage1, dtype, s1, weight_in_stage1),
          pingpong_variant(StageRole::stage2, dtype, s2, weight_in_stage1)};
}

std::vector<LayerPlan> pingpong_plans() {
  return {
      // one 64-row block per warpgroup; stage 2 runs 8 k-tiles through a 4-deep ring
      pingpong_plan(DType::bf16, {64, 64, 8, 3, 3}, {64, 128, 8, 4, 3}),
      // two 64-row blocks per warpgroup, routed weight in stage 1, 16-bit partials / split-K
      pingpong_plan(DType::bf16, {128, 64, 8, 3, 4}, {128, 64, 8, 3, 2, Reduce::partials16}, true),
      pingpong_plan(DType::bf16, {64, 128, 8, 4, 2}, {64, 64, 8, 3, 5, Reduce::atomic, 2}),
      // fp8 per-tensor, fast accumulation; stage 2 on row scales with N = 256
      pingpong_plan(DType::e4m3, {64, 128, 8, 3, 3}, {64, 256, 8, 3, 3}),
  };
}

const ReferenceOutput& reference_for(const Case& c, const LayerPlan& plan) {
  const int ref = plan.stage1.contract().weight_in_stage1 ? 1 : 0;
  return fp8::inter_row_scales(plan.stage2) ? c.row_scales[ref] : c.reference[ref];
}

TEST(EmuPingPong, MatchesTheCpuReference) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  for (const LayerPlan& plan : pingpong_plans()) {
    const DType dtype = plan.stage1.dtype;
    for (const Variant* v : {&plan.stage1, &plan.stage2}) {
      const auto why = why_illegal(*v, small_problem(dtype));
      ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
      EXPECT_NE(v->name().find("_t"), std::string::npos) << v->name();
      EXPECT_NE(v->name().find("_pp"), std::string::npos) << v->name();
    }
    expect_plan_matches(bench, plan, [&](const Case& c) -> const ReferenceOutput& { return reference_for(c, plan); });
  }
}

// The stage's generated unit with ft::PingPongTurns replaced for its Config
// by one that never waits and never passes the turn.
KernelSource without_handoff(const Variant& v) {
  return with_code_before_kernel(v, R"(template <>
struct ft::PingPongTurns<Config> {  // the mutant: no hand-off
  FT_DEVICE static void wait(ft::u64*, int) {}
  FT_DEVICE static void pass(ft::u64*, int) {}
};
)", "_mutant_no_handoff");
}

TEST(EmuPingPong, DroppedHandOffFails) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  const LayerPlan plan = pingpong_plans().front();  // stage 2: 8 k-tiles per tile, 4 stages
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  auto mutant = bench.entry(without_handoff(plan.stage2), plan.stage2.name());
  ASSERT_TRUE(mutant) << mutant.error().describe();
  RoleKernels k = *kernels;
  k.of(Role::stage2) = *mutant;
  for (int tokens : {7}) {  // one T: the mutant's deadlocked waits run the emulator's spin limit out (~100 s)
    const Case& c = case_for(DType::bf16, tokens);
    auto dw = DeviceWorkload::upload(bench.device(), c.workload);
    ASSERT_TRUE(dw) << dw.error().describe();
    auto run = run_layer(*dw, k, plan);
    if (!run) continue;  // a fault (a wait that never completes, an arrival too many) is a failure too
    const Comparison y = compare_output(run->y, reference_for(c, plan).y, DType::bf16);
    EXPECT_FALSE(y.passed) << "T=" << tokens << ": ping-pong without the hand-off passed: " << y.summary();
  }
}

}  // namespace
}  // namespace ft::emu::test
