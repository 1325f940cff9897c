// Dynamic tile walks (templates/ft/tile_order.hpp, Cfg::dynamic_tiles,
// wgmma_sched=dynamic, docs/HOPPER.md): layers whose stages run in persistent
// producer blocks that take their tiles by tickets from MoeArgs::tile_tickets,
// against the CPU reference at T = 1, 7, 33 (ragged experts, one with no
// tokens, T not a multiple of the tile): bf16 with one and two consumer
// warpgroups, ping-pong, routed weight in either stage, atomic and 16-bit
// partial sums, split-K; fp8 per-tensor with stage 2 on row scales. The test
// workload leaves the tickets spent (2^30) before each run, so a program
// without its clear_tile_tickets step computes nothing and fails. Mutants that
// must fail: a walk that takes two tickets at a time (every other tile never
// computed), and the program's clear step removed.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "templates/ft/moe_inter_scales.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

struct Stage : PersistentStage {
  bool pingpong = false;  // 8x1 warps only
};

Variant dynamic_variant(StageRole role, DType dtype, const Stage& s, bool weight_in_stage1) {
  Variant v = persistent_stage(role, dtype, s, weight_in_stage1).set("dynamic_tiles", 1);
  if (s.warps_m == 8) v.set("pingpong", s.pingpong);
  return v;
}

LayerPlan dynamic_plan(DType dtype, const Stage& s1, const Stage& s2, bool weight_in_stage1 = false) {
  return {dynamic_variant(StageRole::stage1, dtype, s1, weight_in_stage1),
          dynamic_variant(StageRole::stage2, dtype, s2, weight_in_stage1)};
}

std::vector<LayerPlan> dynamic_plans() {
  return {
      // one consumer warpgroup; stage 2 runs 8 k-tiles through a 4-deep ring
      dynamic_plan(DType::bf16, {{64, 64, 4, 3, 3}}, {{64, 128, 4, 4, 2}}),
      // two consumer warpgroups splitting each tile, routed weight in stage 1, 16-bit partials
      dynamic_plan(DType::bf16, {{128, 64, 8, 3, 4}}, {{128, 64, 8, 3, 2, Reduce::partials16}}, true),
      // ping-pong consumers, split-K (the walk's splits outermost)
      dynamic_plan(DType::bf16, {{64, 128, 8, 4, 2}, true}, {{64, 64, 8, 3, 5, Reduce::atomic, 2}, true}),
      // fp8 per-tensor, fast accumulation; stage 2 on row scales with N = 256
      dynamic_plan(DType::e4m3, {{64, 128, 4, 3, 3}}, {{64, 256, 4, 3, 3}}),
  };
}

const ReferenceOutput& reference_for(const Case& c, const LayerPlan& plan) {
  const int ref = plan.stage1.contract().weight_in_stage1 ? 1 : 0;
  return fp8::inter_row_scales(plan.stage2) ? c.row_scales[ref] : c.reference[ref];
}

TEST(EmuDynamicTiles, MatchesTheCpuReference) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  for (const LayerPlan& plan : dynamic_plans()) {
    const DType dtype = plan.stage1.dtype;
    for (const Variant* v : {&plan.stage1, &plan.stage2}) {
      const auto why = why_illegal(*v, small_problem(dtype));
      ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
      EXPECT_NE(v->name().find("_dyn"), std::string::npos) << v->name();
      EXPECT_TRUE(v->contract().tile_tickets) << v->name();
    }
    expect_plan_matches(bench, plan, [&](const Case& c) -> const ReferenceOutput& { return reference_for(c, plan); });
  }
}

// Runs `plan` with stage 2 replaced by `stage2` (or the program edited) at T = 33
// and expects its output to fail the reference.
void expect_mutant_fails(TargetBench& bench, const LayerPlan& plan, std::optional<FunctionHandle> stage2,
                         void (*edit)(LayerProgram&), const std::string& what) {
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  RoleKernels k = *kernels;
  if (stage2) k.of(Role::stage2) = *stage2;
  const Case& c = case_for(DType::bf16, 33);
  auto dw = DeviceWorkload::upload(bench.device(), c.workload);
  ASSERT_TRUE(dw) << dw.error().describe();
  auto run = run_layer(*dw, k, plan, {.edit_program = edit});
  ASSERT_TRUE(run) << what << ": " << run.error().describe();  // both mutants run to their end, with wrong output
  const Comparison y = compare_output(run->y, reference_for(c, plan).y, DType::bf16);
  EXPECT_FALSE(y.passed) << what << " passed: " << y.summary();
}

TEST(EmuDynamicTiles, SkippedTicketsFail) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  const LayerPlan plan = dynamic_plans().front();
  // The stage's generated unit with ft::TicketTake replaced for its Config by
  // one that takes two tickets and keeps the second.
  KernelSource unit = with_code_before_kernel(plan.stage2, R"(template <>
struct ft::TicketTake<Config> {  // the mutant: every other tile skipped
  FT_DEVICE static int take(ft::i32* counter) { ft::atomic_add(counter, 1); return ft::atomic_add(counter, 1); }
};
)", "_mutant_skips");
  auto mutant = bench.entry(unit, plan.stage2.name());
  ASSERT_TRUE(mutant) << mutant.error().describe();
  expect_mutant_fails(bench, plan, *mutant, nullptr, "a walk skipping every other ticket");
}

TEST(EmuDynamicTiles, ProgramWithoutTheClearFails) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  const LayerPlan plan = dynamic_plans().front();
  auto prog = build_program(plan.recipe(small_problem(DType::bf16)), 33);
  ASSERT_TRUE(prog) << prog.error().describe();
  ASSERT_NE(prog->find("clear_tile_tickets"), nullptr) << "the program has no clear_tile_tickets step";
  expect_mutant_fails(bench, plan, std::nullopt,
                      [](LayerProgram& p) { std::erase_if(p.steps, [](const Step& s) { return s.name == "clear_tile_tickets"; }); },
                      "the program without clear_tile_tickets");
}

}  // namespace
}  // namespace ft::emu::test
