// Stage 2 writing Y itself (reduce = atomic_y, partials_y: no reduce step,
// arrival counters per token and 32 columns, templates/ft/moe_stage2.hpp)
// through the emulator: whole layers against the CPU reference at T = 1, 7, 33
// with an expert receiving no tokens; -1 ids, with tokens none of whose slots
// is routed (align writes their zero rows); partials_y's Y bit for bit the same
// on every run and the same as the partials layer's reduce; and a mutant whose
// counts finish a chunk one slot early fails.
#include <gtest/gtest.h>

#include <algorithm>

#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

// Slot `slot` of the target's emulator slice with stage 2 in a _y mode:
// atomic_y on slots 0 and 1 (slot 1 with split-K 2), partials_y on 2 and 3
// (on sm_90a: a producer warpgroup with 192-row tiles of 32 columns, and a
// persistent warp-specialised grid).
LayerPlan direct_y_plan(const Target& t, int slot) {
  LayerPlan plan = plans_for(t)[std::size_t(slot)];
  const Reduce mode = slot < 2 ? Reduce::atomic_y : Reduce::partials_y;
  plan.stage2.set("reduce", int(mode));
  if (mode == Reduce::partials_y) plan.stage2.set("split_k", 1);
  if (slot == 1) plan.stage2.set("split_k", 2);
  return plan;
}

using DirectYParam = std::tuple<const char*, int>;  // target, slot

class EmuDirectY : public ::testing::TestWithParam<DirectYParam> {};

TEST_P(EmuDirectY, MatchesTheCpuReferenceWithoutAReduceStep) {
  const Target& t = target(std::get<0>(GetParam()));
  const LayerPlan plan = direct_y_plan(t, std::get<1>(GetParam()));
  for (const Variant* v : {&plan.stage1, &plan.stage2}) {
    const auto why = why_illegal(*v, small_problem(v->dtype));
    ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
  }
  TargetBench& bench = TargetBench::of(t);
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  for (int tokens : kTokenCounts) {
    const Case& c = case_for(plan.stage1.dtype, tokens);
    auto prog = build_program(plan.recipe(c.workload.problem), tokens);
    ASSERT_TRUE(prog) << prog.error().describe();
    EXPECT_EQ(prog->find("reduce"), nullptr) << plan_label(plan);
    auto dw = DeviceWorkload::upload(bench.device(), c.workload);
    ASSERT_TRUE(dw) << dw.error().describe();
    auto cmp = verify_layer(*dw, *kernels, plan, c.reference[plan.stage1.contract().weight_in_stage1 ? 1 : 0]);
    ASSERT_TRUE(cmp) << plan_label(plan) << " T=" << tokens << ": " << cmp.error().describe();
    EXPECT_TRUE(cmp->passed) << plan_label(plan) << " T=" << tokens << ": " << cmp->summary(std::size_t(c.workload.problem.hidden));
  }
}

// Slots 0 and 1 (atomic_y, with split-K 2 on 1) and 2, 3 (partials_y).
INSTANTIATE_TEST_SUITE_P(Targets, EmuDirectY,
                         ::testing::Combine(::testing::Values("gfx942", "sm_90a"), ::testing::Range(0, 4)),
                         [](const ::testing::TestParamInfo<DirectYParam>& info) {
                           return fmt::format("{}_slot{}", std::get<0>(info.param), std::get<1>(info.param));
                         });

// Expert parallelism masks other ranks' slots with -1; a token whose slots are
// all masked gets no value in any chunk, so no chunk of it finishes: its row
// must still be zeros (align writes it), not the poison run_layer leaves in Y.
TEST(EmuDirectY, MaskedSlotsAndUnroutedTokens) {
  for (const char* name : {"gfx942", "sm_90a"})
    for (int slot : {0, 3}) {
      const Target& t = target(name);
      const LayerPlan plan = direct_y_plan(t, slot);
      TargetBench& bench = TargetBench::of(t);
      auto kernels = bench.kernels(plan);
      ASSERT_TRUE(kernels) << kernels.error().describe();
      Workload w = case_for(plan.stage1.dtype, 33).workload;
      const int k = w.problem.topk;
      for (std::int32_t& id : w.topk_ids)
        if (id >= 2) id = -1;  // this rank owns experts 0 and 1
      for (int s = 0; s < k; ++s) w.topk_ids[std::size_t(5 * k + s)] = -1;  // token 5: every slot masked
      int unrouted = 0;
      for (int tok = 0; tok < w.tokens; ++tok)
        unrouted += std::all_of(w.topk_ids.begin() + tok * k, w.topk_ids.begin() + (tok + 1) * k, [](int e) { return e < 0; });
      ASSERT_GE(unrouted, 1);
      const ReferenceOutput ref = reference_layer(w, {.weight_in_stage1 = plan.stage1.contract().weight_in_stage1});
      auto dw = DeviceWorkload::upload(bench.device(), w);
      ASSERT_TRUE(dw) << dw.error().describe();
      auto cmp = verify_layer(*dw, *kernels, plan, ref);
      ASSERT_TRUE(cmp) << plan_label(plan) << ": " << cmp.error().describe();
      EXPECT_TRUE(cmp->passed) << plan_label(plan) << " (" << unrouted << " unrouted tokens): " << cmp->summary();
      auto run = run_layer(*dw, *kernels, plan);
      ASSERT_TRUE(run) << run.error().describe();
      const std::size_t H = std::size_t(w.problem.hidden);
      EXPECT_TRUE(std::all_of(run->y.begin() + 5 * H, run->y.begin() + 6 * H, [](std::uint16_t v) { return v == 0; }))
          << plan_label(plan) << ": token 5 has no routed slot, its Y row is not zeros";
    }
}

// partials_y sums each token's slot rows in slot order: Y is the same bits on
// every run, and the same bits as the partials layer (its reduce kernel sums
// the same fp32 rows in the same order).
TEST(EmuDirectY, PartialsYIsDeterministicAndEqualsThePartialsReduce) {
  for (const char* name : {"gfx942", "sm_90a"}) {
    const Target& t = target(name);
    const LayerPlan direct = direct_y_plan(t, 2);
    LayerPlan reduced = direct;
    reduced.stage2.set("reduce", int(Reduce::partials));
    TargetBench& bench = TargetBench::of(t);
    auto kd = bench.kernels(direct);
    auto kr = bench.kernels(reduced);
    ASSERT_TRUE(kd && kr);
    for (int tokens : {7, 33}) {
      auto dw = DeviceWorkload::upload(bench.device(), case_for(direct.stage1.dtype, tokens).workload);
      ASSERT_TRUE(dw) << dw.error().describe();
      auto first = run_layer(*dw, *kd, direct);
      auto second = run_layer(*dw, *kd, direct);
      auto partials = run_layer(*dw, *kr, reduced);
      ASSERT_TRUE(first && second && partials);
      EXPECT_TRUE(first->y == second->y) << plan_label(direct) << " T=" << tokens << ": two runs differ";
      EXPECT_TRUE(first->y == partials->y) << plan_label(direct) << " T=" << tokens << ": differs from " << plan_label(reduced);
    }
  }
}

// The mutant's stage 2 finishes a chunk when it holds one slot's values fewer
// than it will: the layer (the program of an atomic_y plan) must fail, the
// control of the same configuration pass.
Result<Comparison> run_with_stage2(const char* entry, int tokens) {
  const Target& t = target("gfx942");
  Variant v = Variant::of(t, StageRole::stage1, *find_atom("mfma_f32_16x16x16_bf16"));
  v.set("tile_m", 32).set("tile_n", 64).set("tile_k", 32).set("warps_m", 2).set("warps_n", 2).set("stages", 2);
  LayerPlan plan{v, v};
  plan.stage2.role = StageRole::stage2;
  plan.stage2.set("reduce", int(Reduce::atomic_y));
  TargetBench& bench = TargetBench::of(t);
  RoleKernels k = FT_TRY(bench.kernels(plan));
  k.of(Role::stage2) = FT_TRY(bench.entry(unit_from_file("direct_y_mutants.cpp", {"ft_control_y_moe2", "ft_mutant_early_y_moe2"}), entry));
  const Case& c = case_for(DType::bf16, tokens);
  DeviceWorkload dw = FT_TRY(DeviceWorkload::upload(bench.device(), c.workload));
  return verify_layer(dw, k, plan, c.reference[0]);
}

TEST(EmuDirectY, ControlPassesAndAnEarlyFinishFails) {
  for (int tokens : {7, 33}) {
    auto good = run_with_stage2("ft_control_y_moe2", tokens);
    ASSERT_TRUE(good) << good.error().describe();
    EXPECT_TRUE(good->passed) << "T=" << tokens << ": " << good->summary();
    auto bad = run_with_stage2("ft_mutant_early_y_moe2", tokens);
    ASSERT_TRUE(bad) << bad.error().describe();
    EXPECT_FALSE(bad->passed) << "T=" << tokens << ": chunks finished a slot early passed: " << bad->summary();
  }
}

}  // namespace
}  // namespace ft::emu::test
