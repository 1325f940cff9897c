// Whole MoE layers (align, stage 1, stage 2, reduce) through the emulator for
// every target and a slice of its variant space, against the CPU reference, at
// T = 1, 7, 33 with one expert receiving no tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

using LayerParam = std::tuple<const char*, int>;  // target, plan slot

class EmuLayer : public ::testing::TestWithParam<LayerParam> {};

TEST_P(EmuLayer, MatchesTheCpuReference) {
  const Target& t = target(std::get<0>(GetParam()));
  const std::vector<LayerPlan> plans = plans_for(t);
  const std::size_t slot = std::size_t(std::get<1>(GetParam()));
  if (slot >= plans.size()) GTEST_SKIP() << t.name << " has " << plans.size() << " plans";
  const LayerPlan& plan = plans[slot];
  for (const Variant* v : {&plan.stage1, &plan.stage2}) {
    const auto why = why_illegal(*v, small_problem(v->dtype));
    ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
  }
  TargetBench& bench = TargetBench::of(t);
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  for (int tokens : kTokenCounts) {
    const Case& c = case_for(plan.stage1.dtype, tokens);
    auto dw = DeviceWorkload::upload(bench.device(), c.workload);
    ASSERT_TRUE(dw) << dw.error().describe();
    auto cmp = verify_layer(*dw, *kernels, plan, c.reference[plan.stage1.contract().weight_in_stage1 ? 1 : 0]);
    ASSERT_TRUE(cmp) << plan_label(plan) << " T=" << tokens << ": " << cmp.error().describe();
    EXPECT_TRUE(cmp->passed) << plan_label(plan) << " T=" << tokens << ": " << cmp->summary(std::size_t(c.workload.problem.hidden));
    RecordProperty(fmt::format("T{}", tokens), cmp->summary());
  }
}

std::string layer_name(const ::testing::TestParamInfo<LayerParam>& info) {
  return fmt::format("{}_plan{}", std::get<0>(info.param), std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Targets, EmuLayer,
                         ::testing::Combine(::testing::Values("gfx90a", "gfx942", "gfx950", "sm_90a"), ::testing::Range(0, 8)),
                         layer_name);

// Expert-parallel serving masks other ranks' slots with -1: those slots add
// nothing, with atomic and with partials reduction alike (partials must not
// read rows stage 2 never wrote). Ids outside [-1, experts) are left out and
// counted, never used as indices.
class EmuMaskedLayer : public ::testing::TestWithParam<LayerParam> {};

TEST_P(EmuMaskedLayer, MaskedSlotsContributeNothingAndBadIdsAreCounted) {
  const Target& t = target(std::get<0>(GetParam()));
  const std::vector<LayerPlan> plans = plans_for(t);
  const std::size_t slot = std::size_t(std::get<1>(GetParam()));
  ASSERT_LT(slot, plans.size());
  const LayerPlan& plan = plans[slot];
  TargetBench& bench = TargetBench::of(t);
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  Workload w = case_for(plan.stage1.dtype, 33).workload;
  for (std::int32_t& id : w.topk_ids)
    if (id >= 2) id = -1;  // this rank owns experts 0 and 1
  const ReferenceOutput ref = reference_layer(w, {.weight_in_stage1 = plan.stage1.contract().weight_in_stage1});
  auto dw = DeviceWorkload::upload(bench.device(), w);
  ASSERT_TRUE(dw) << dw.error().describe();
  auto cmp = verify_layer(*dw, *kernels, plan, ref);
  ASSERT_TRUE(cmp) << plan_label(plan) << ": " << cmp.error().describe();
  EXPECT_TRUE(cmp->passed) << plan_label(plan) << " (" << to_string(plan.stage2.contract().output) << "): " << cmp->summary();

  w.topk_ids[0] = 7;     // beyond the 4 experts
  w.topk_ids[5] = -3;    // negative, not -1
  w.topk_ids[9] = 1 << 30;
  auto bad = DeviceWorkload::upload(bench.device(), w);
  ASSERT_TRUE(bad);
  auto run = run_layer(*bad, *kernels, plan);
  ASSERT_TRUE(run) << run.error().describe();
  EXPECT_EQ(run->bad_ids, 3);
  auto refused = verify_layer(*bad, *kernels, plan, ref);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("3 routing ids outside [-1, 4)"), std::string::npos) << refused.error().describe();
}

// Slots 0, 1 and 3 of the slice: atomic, atomic with split-K, partials
// (on sm_90a slot 3 is a persistent warp-specialised layer).
INSTANTIATE_TEST_SUITE_P(Targets, EmuMaskedLayer,
                         ::testing::Combine(::testing::Values("gfx90a", "gfx942", "gfx950", "sm_90a"), ::testing::Values(0, 1, 3)),
                         layer_name);

// The slice covers every axis value on every target.
TEST(EmuLayerSlice, CoversEveryAxisOnEveryTarget) {
  for (const Target& t : all_targets()) {
    const auto plans = plans_for(t);
    EXPECT_GE(plans.size(), 8u) << t.name;
    std::set<std::string> atoms;
    std::set<int> stages, split;
    std::set<bool> weight;
    std::set<Reduce> reduce;
    std::set<WeightLayout> layouts;
    for (const auto& p : plans) {
      atoms.insert(std::string(p.stage1.atom()->id));
      stages.insert(p.stage1.get("stages"));
      split.insert(p.stage2.get("split_k"));
      weight.insert(p.stage1.contract().weight_in_stage1);
      reduce.insert(p.stage2.contract().output);
      layouts.insert(p.stage1.contract().weights);
      layouts.insert(p.stage2.contract().weights);
    }
    EXPECT_EQ(atoms.size(), atoms_for(t, DType::bf16).size() + atoms_for(t, DType::f16).size()) << t.name;
    EXPECT_GE(stages.size(), 2u) << t.name;  // 1 and 2; plus 3 and 4 where wgmma atoms exist
    EXPECT_EQ(split.size(), 2u) << t.name;
    EXPECT_EQ(weight.size(), 2u) << t.name;
    EXPECT_EQ(reduce.size(), kReduceModes.size()) << t.name;  // atomic, fp32 partials, 16-bit partials
    const bool wgmma = std::any_of(plans.begin(), plans.end(), [](const LayerPlan& p) { return p.stage1.atom()->warpgroup(); });
    EXPECT_EQ(layouts.size(), wgmma ? 4u : 2u) << t.name;  // plain, shuffled (+ the producer warpgroup's tiled and mapped)
  }
}

}  // namespace
}  // namespace ft::emu::test
