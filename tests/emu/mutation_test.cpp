// The emulator catches what compiles cleanly but computes wrongly: a broken
// atom operand layout and a wrong gather row each fail whole-layer
// verification, while the unmutated kernel of the same configuration passes.
#include <gtest/gtest.h>

#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

LayerPlan mutant_plan(const Target& t) {
  Variant v;
  v.target = &t;
  v.dtype = DType::bf16;
  v.atom = find_atom("mfma_f32_16x16x16_bf16");
  v.tile_m = 32;
  v.tile_n = 64;
  v.tile_k = 32;
  v.warps_m = v.warps_n = 2;
  v.stages = 2;
  LayerPlan plan;
  plan.stage1 = v;
  plan.stage1.kind = KernelKind::moe1;
  plan.stage2 = v;
  plan.stage2.kind = KernelKind::moe2;
  return plan;
}

Result<Comparison> run_with_stage1(const char* stage1_entry, int tokens) {
  const Target& t = target("gfx942");
  TargetBench& bench = TargetBench::of(t);
  const LayerPlan plan = mutant_plan(t);
  LayerKernels k = FT_TRY(bench.kernels(plan));
  k.stage1 = FT_TRY(bench.entry(unit_from_file("mutants.cpp", {"ft_control_moe1", "ft_mutant_broken_atom_moe1",
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

}  // namespace
}  // namespace ft::emu::test
