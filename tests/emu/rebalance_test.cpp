// Register rebalance (templates/ft/wgmma_gemm.hpp, Cfg::rebalance, docs/HOPPER.md):
// layers whose stages run in persistent producer blocks of three consumer
// warpgroups (m192 tiles, N = 256 accumulated per lane) whose producer keeps
// its A-row pointers in shared memory (pointer_table), against the CPU
// reference at T = 1, 7, 33 (ragged experts, one with no tokens, T not a
// multiple of the tile): bf16, and fp8 per-tensor with fast accumulation and
// stage 2 on row scales; stage 1 rebalanced or not. setmaxnreg itself changes
// nothing on the emulator; the per-role tile copies (lanes.hpp), the pointer
// table and the wgmma split at N = 128 run as on the GPU. The mutant, a
// producer lane reading the pointer slot of its next chunk, must fail.
#include <gtest/gtest.h>

#include <string>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "templates/ft/moe_inter_scales.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

Variant rebalanced(StageRole role, DType dtype, int tile_m, int tile_n, int consumers, bool rebalance) {
  const bool fp8 = dtype == DType::e4m3;
  Variant v = Variant::of(target("sm_90a"), role, *find_atom(fp8 ? "wgmma_m64k32_f32_e4m3" : "wgmma_m64k16_f32_bf16"));
  v.set("tile_m", tile_m).set("tile_n", tile_n).set("tile_k", fp8 ? 128 : 64);
  v.set("warps_m", 4 * consumers).set("warps_n", 1).set("stages", 3);
  v.set("warp_specialized", 1).set("tiles_per_block", 3).set("rebalance", rebalance ? 1 : 0);
  v.set("layout", int(WeightLayout::tiled));
  if (role == StageRole::stage2) v.set("reduce", int(Reduce::atomic)).set("split_k", 1);
  if (fp8) {
    v.set("scales", int(Scales::per_tensor)).set("promote", 0);
    if (role == StageRole::stage2) v.set("inter_scales", int(InterScales::row));
  }
  return v;
}

std::vector<LayerPlan> rebalance_plans() {
  return {
      {rebalanced(StageRole::stage1, DType::bf16, 192, 128, 3, true), rebalanced(StageRole::stage2, DType::bf16, 192, 256, 3, true)},
      {rebalanced(StageRole::stage1, DType::e4m3, 192, 128, 3, true), rebalanced(StageRole::stage2, DType::e4m3, 192, 256, 3, true)},
      // an even stage 1 of the same rows (three consumers fit 64 columns evenly) beside a rebalanced stage 2
      {rebalanced(StageRole::stage1, DType::e4m3, 192, 64, 3, false), rebalanced(StageRole::stage2, DType::e4m3, 192, 256, 3, true)},
  };
}

const ReferenceOutput& reference_for(const Case& c, const LayerPlan& plan) {
  return fp8::inter_row_scales(plan.stage2) ? c.row_scales[0] : c.reference[0];
}

TEST(EmuRebalance, MatchesTheCpuReference) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  for (const LayerPlan& plan : rebalance_plans()) {
    const DType dtype = plan.stage1.dtype;
    for (const Variant* v : {&plan.stage1, &plan.stage2}) {
      const auto why = why_illegal(*v, small_problem(dtype));
      ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
    }
    EXPECT_NE(plan.stage2.name().find("_t3_rb"), std::string::npos) << plan.stage2.name();
    expect_plan_matches(bench, plan, [&](const Case& c) -> const ReferenceOutput& { return reference_for(c, plan); });
  }
}

// The stage's generated unit with its Gemm's read-back of a pointer slot
// replaced by one that reads the lane's slot of its next chunk (another row's
// pointer: a slot of another lane may not be written yet, a wild pointer).
KernelSource other_chunk_slot(const Variant& v) {
  return with_code_before_kernel(v, R"(template <>
FT_DEVICE const ft::WgmmaGemm<Config, 1, 0>::Operand* ft::WgmmaGemm<Config, 1, 0>::source(int l, int j) const {
  return pointer_table()[(j + 1) % kChunksPerThread * kLoaders + l];  // the mutant: its next chunk's slot
}
)", "_mutant_other_chunk_slot");
}

TEST(EmuRebalance, AnotherChunksPointerSlotFails) {
  TargetBench& bench = TargetBench::of(target("sm_90a"));
  const LayerPlan plan = rebalance_plans().front();
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  auto mutant = bench.entry(other_chunk_slot(plan.stage2), plan.stage2.name());
  ASSERT_TRUE(mutant) << mutant.error().describe();
  RoleKernels k = *kernels;
  k.of(Role::stage2) = *mutant;
  const Case& c = case_for(DType::bf16, 33);
  auto dw = DeviceWorkload::upload(bench.device(), c.workload);
  ASSERT_TRUE(dw) << dw.error().describe();
  auto run = run_layer(*dw, k, plan);
  ASSERT_TRUE(run) << run.error().describe();
  const Comparison y = compare_output(run->y, reference_for(c, plan).y, DType::bf16);
  EXPECT_FALSE(y.passed) << "reading another chunk's pointer slot passed: " << y.summary();
}

}  // namespace
}  // namespace ft::emu::test
