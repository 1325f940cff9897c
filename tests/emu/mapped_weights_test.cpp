// Weights through tensor maps (issue 49; WeightLayout::mapped, "_map",
// wgmma_weights=mapped): the producer warpgroup's lane loads each weight tile
// with one tensor-map copy from the plain weights (templates/ft/wgmma_gemm.hpp),
// the map encoded by the layer program's execution on every launch
// (layer/execute.cpp, ft::MappedMoeArgs). Whole layers against the CPU
// reference at T = 1, 7, 33 (ragged experts, one with no tokens, T not a
// multiple of the tile): bf16 with split-K (the map's column starts past 0)
// and fp8 per-tensor (one-byte elements, stage 2 with N = 256). The emulated
// TMA unit lays each box out in the map's swizzle and zero-fills rows outside
// the map's matrix, so mutants of the map the host encodes must fail: maps without
// the swizzle, and a matrix that ends half way (the upper experts read as zeros).
// (A box short of the mbarrier's bytes is tests/emu/tma_test.cpp's deadlock fault.)
#include <gtest/gtest.h>

#include <string>

#include "generator/families/families.hpp"
#include "templates/ft/moe_inter_scales.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

Variant mapped_stage(StageRole role, DType dtype, const PersistentStage& s) {
  return persistent_stage(role, dtype, s, false).set("layout", int(WeightLayout::mapped));
}

std::vector<LayerPlan> mapped_plans() {
  return {
      // bf16: one consumer warpgroup in persistent blocks; stage 2 split in two along k
      {mapped_stage(StageRole::stage1, DType::bf16, {64, 64, 4, 3, 3}),
       mapped_stage(StageRole::stage2, DType::bf16, {64, 64, 4, 3, 2, Reduce::atomic, 2})},
      // fp8 per-tensor, fast accumulation; stage 2 on row scales with N = 256
      {mapped_stage(StageRole::stage1, DType::e4m3, {64, 128, 4, 3, 3}),
       mapped_stage(StageRole::stage2, DType::e4m3, {64, 256, 4, 3, 1})},
  };
}

const ReferenceOutput& reference_for(const Case& c, const LayerPlan& plan) {
  return fp8::inter_row_scales(plan.stage2) ? c.row_scales[0] : c.reference[0];
}

TEST(EmuMappedWeights, MatchesTheCpuReference) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  for (const LayerPlan& plan : mapped_plans()) {
    for (const Variant* v : {&plan.stage1, &plan.stage2}) {
      const auto why = why_illegal(*v, small_problem(v->dtype));
      ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
      EXPECT_NE(v->name().find("_map"), std::string::npos) << v->name();
    }
    auto prog = build_program(plan.recipe(small_problem(plan.stage1.dtype)), 33);
    ASSERT_TRUE(prog) << prog.error().describe();
    for (const char* stage : {"stage1", "stage2"}) {
      const Step* s = prog->find(stage);
      ASSERT_NE(s, nullptr) << stage;
      ASSERT_TRUE(s->weight_map) << stage << " has no weight map";
      EXPECT_EQ(s->weight_map->box_rows, std::uint32_t((s->role == Role::stage1 ? plan.stage1 : plan.stage2).get("tile_n")));
      EXPECT_EQ(s->weight_map->box_cols * s->weight_map->elem_bytes, 128u) << "one k-tile: a 128-byte swizzle row";
      EXPECT_EQ(s->role == Role::stage1 ? s->w1 : s->w2, s->role == Role::stage1 ? Buf::w1 : Buf::w2) << "the plain weights";
    }
    EXPECT_EQ(prog->bytes[std::size_t(Buf::w1_tiled)], 0u) << "no tiled copy of the weights";
    expect_plan_matches(bench, plan, [&](const Case& c) -> const ReferenceOutput& { return reference_for(c, plan); });
  }
}

// Runs the bf16 plan at T = 33 with its program edited and expects it to run
// to its end with a wrong output.
void expect_mutant_fails(void (*edit)(LayerProgram&), const std::string& what) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  const LayerPlan plan = mapped_plans().front();
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  const Case& c = case_for(DType::bf16, 33);
  auto dw = DeviceWorkload::upload(bench.device(), c.workload);
  ASSERT_TRUE(dw) << dw.error().describe();
  auto run = run_layer(*dw, *kernels, plan, {.edit_program = edit});
  ASSERT_TRUE(run) << what << ": " << run.error().describe();  // it runs, with wrong output
  const Comparison y = compare_output(run->y, reference_for(c, plan).y, DType::bf16);
  EXPECT_FALSE(y.passed) << what << " passed: " << y.summary();
}

void edit_maps(LayerProgram& p, void (*f)(TensorMapSpec&)) {
  for (Step& s : p.steps)
    if (s.weight_map) f(*s.weight_map);
}

TEST(EmuMappedWeights, AMapWithoutTheSwizzleFails) {
  // The boxes land row by row, unswizzled; wgmma reads them in the 128-byte swizzle.
  expect_mutant_fails([](LayerProgram& p) { edit_maps(p, [](TensorMapSpec& m) { m.swizzle = 0; }); },
                      "maps without the swizzle");
}

TEST(EmuMappedWeights, AMapEndingHalfWayFails) {
  expect_mutant_fails([](LayerProgram& p) { edit_maps(p, [](TensorMapSpec& m) { m.rows /= 2; }); },
                      "maps of half the weight rows");
}

}  // namespace
}  // namespace ft::emu::test
