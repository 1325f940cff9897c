// The one-launch decode layer (templates/ft/moe_decode.hpp, LayerRecipe::
// decode_cols) through the emulator: its layer program, the CPU reference at
// T = 1, 7, 33 (one expert with no tokens, T*k not a multiple of anything the
// kernel tiles by), masked (-1) and bad ids, and a hand-over released early
// that verification must catch.
#include <gtest/gtest.h>

#include "templates/ft/decode_shape.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

// A plan of the decode form; its stage variants (the slice's first of the
// dtype) only name the target.
LayerPlan decode_plan(const Target& t, DType d, int cols) {
  for (const LayerPlan& p : plans_for(t))
    if (p.stage1.dtype == d) {
      LayerPlan plan = p;
      plan.decode_cols = cols;
      return plan;
    }
  ADD_FAILURE() << t.name << " has no " << to_string(d) << " plan";
  return {};
}

Result<RoleKernels> decode_kernels(TargetBench& bench, const Target& t, DType d, int cols) {
  RoleKernels k;
  k.decode = FT_TRY(bench.entry(emit_support(t, d), decode_entry(t, d, cols)));
  return k;
}

TEST(EmuDecodeProgram, OneMemsetAndOneLaunch) {
  const Target& t = target("sm_90a");
  const LayerPlan plan = decode_plan(t, DType::bf16, 16);
  const Problem p = small_problem(DType::bf16);
  auto prog = build_program(plan.recipe(p), 7);
  ASSERT_TRUE(prog) << prog.error().describe();
  ASSERT_EQ(prog->steps.size(), 2u);
  EXPECT_EQ(prog->steps[0].op, Step::Op::memset_u32);
  EXPECT_EQ(prog->steps[0].buffer, Buf::sorted_ids);  // the ticket and arrival counters
  EXPECT_EQ(prog->steps[0].count, 1u + 4u);  // the ticket and min(E, T*k) arrival counters
  EXPECT_EQ(prog->steps[1].symbol, "ft_sm_90a_decode_bf16_c16");
  EXPECT_EQ(prog->steps[1].shape.grid_x, 4 * 512 / 16 + 256 / 16);
  EXPECT_EQ(prog->bytes[std::size_t(Buf::y_acc)], 0u);  // no fp32 sums, no clear, no reduce
  EXPECT_EQ(prog->bytes[std::size_t(Buf::block_experts)], 0u);

  struct Refusal {
    DType dtype;
    int tokens, cols;
    const char* says;
  };
  for (const Refusal& r : {Refusal{DType::bf16, kDecodeMaxTokens + 1, 16, "up to 64 tokens"},
                           Refusal{DType::bf16, 1, 12, "no 12-column form"},
                           Refusal{DType::e4m3, 1, 16, "bf16 and f16"}}) {
    LayerRecipe bad = plan.recipe(small_problem(r.dtype));
    bad.stage1.reset();
    bad.stage2.reset();
    bad.decode_cols = r.cols;
    auto refused = build_program(bad, r.tokens);
    ASSERT_FALSE(refused) << r.says;
    EXPECT_NE(refused.error().message.find(r.says), std::string::npos) << refused.error().describe();
  }
}

using DecodeParam = std::tuple<const char*, DType, int>;  // target, dtype, columns per unit
class EmuDecode : public ::testing::TestWithParam<DecodeParam> {};

TEST_P(EmuDecode, MatchesTheCpuReference) {
  const auto [name, dtype, cols] = GetParam();
  const Target& t = target(name);
  TargetBench& bench = TargetBench::of(t);
  const LayerPlan plan = decode_plan(t, dtype, cols);
  auto k = decode_kernels(bench, t, dtype, cols);
  ASSERT_TRUE(k) << k.error().describe();
  for (int tokens : kTokenCounts) {
    const Case& c = case_for(dtype, tokens);
    auto dw = DeviceWorkload::upload(bench.device(), c.workload);
    ASSERT_TRUE(dw) << dw.error().describe();
    auto cmp = verify_layer(*dw, *k, plan, c.reference[0]);
    ASSERT_TRUE(cmp) << "T=" << tokens << ": " << cmp.error().describe();
    EXPECT_TRUE(cmp->passed) << name << " c" << cols << " T=" << tokens << ": " << cmp->summary();
  }
}

TEST_P(EmuDecode, MaskedSlotsContributeNothingAndBadIdsAreCounted) {
  const auto [name, dtype, cols] = GetParam();
  const Target& t = target(name);
  TargetBench& bench = TargetBench::of(t);
  const LayerPlan plan = decode_plan(t, dtype, cols);
  auto k = decode_kernels(bench, t, dtype, cols);
  ASSERT_TRUE(k) << k.error().describe();
  Workload w = case_for(dtype, 33).workload;
  for (std::int32_t& id : w.topk_ids)
    if (id >= 2) id = -1;  // this rank owns experts 0 and 1
  for (int s = 0; s < w.problem.topk; ++s) w.topk_ids[std::size_t(3 * w.problem.topk + s)] = -1;  // token 3: no expert
  const ReferenceOutput ref = reference_layer(w, {.weight_in_stage1 = false});
  auto dw = DeviceWorkload::upload(bench.device(), w);
  ASSERT_TRUE(dw) << dw.error().describe();
  auto cmp = verify_layer(*dw, *k, plan, ref);
  ASSERT_TRUE(cmp) << cmp.error().describe();
  EXPECT_TRUE(cmp->passed) << cmp->summary();

  w.topk_ids[0] = 7;  // beyond the 4 experts
  w.topk_ids[5] = -3;
  w.topk_ids[9] = 1 << 30;
  auto bad = DeviceWorkload::upload(bench.device(), w);
  ASSERT_TRUE(bad);
  auto run = run_layer(*bad, *k, plan);
  ASSERT_TRUE(run) << run.error().describe();
  EXPECT_EQ(run->bad_ids, 3);
  auto refused = verify_layer(*bad, *k, plan, ref);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("3 routing ids outside [-1, 4)"), std::string::npos) << refused.error().describe();
}

std::string decode_name(const ::testing::TestParamInfo<DecodeParam>& info) {
  return fmt::format("{}_{}_c{}", std::get<0>(info.param), to_string(std::get<1>(info.param)), std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(Forms, EmuDecode,
                         ::testing::Values(DecodeParam{"sm_90a", DType::bf16, 8}, DecodeParam{"sm_90a", DType::bf16, 32},
                                           DecodeParam{"sm_90a", DType::f16, 16}, DecodeParam{"gfx942", DType::bf16, 16}),
                         decode_name);

// Every token on expert 0 (one touched expert: stage 2 reads it first, while
// its last stage-1 units may still run on other blocks), on eight emulator
// threads: the control passes every time; the early release reads rows that
// are still poisoned (NaN) in at least one of the attempts.
TEST(EmuDecodeMutation, EarlyReleaseFailsVerification) {
  const Target& t = target("sm_90a");
  auto l = load(t, unit_from_file("decode_mutants.cpp", {"ft_control_decode", "ft_mutant_early_release_decode"}),
                EmuDeviceOptions{.workers = 8});
  ASSERT_TRUE(l) << l.error().describe();
  const LayerPlan plan = decode_plan(t, DType::bf16, 8);
  int caught = 0;
  constexpr int kAttempts = 4;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    Workload w = case_for(DType::bf16, 33).workload;
    for (std::size_t i = 0; i < w.topk_ids.size(); ++i) w.topk_ids[i] = i % 2 == 0 ? 0 : -1;
    const ReferenceOutput ref = reference_layer(w, {.weight_in_stage1 = false});
    for (const char* entry : {"ft_control_decode", "ft_mutant_early_release_decode"}) {
      RoleKernels k;
      k.decode = l->fn(entry);
      auto dw = DeviceWorkload::upload(*l->device, w);
      ASSERT_TRUE(dw) << dw.error().describe();
      auto cmp = verify_layer(*dw, k, plan, ref);
      ASSERT_TRUE(cmp) << entry << ": " << cmp.error().describe();
      if (std::string_view(entry) == "ft_control_decode") EXPECT_TRUE(cmp->passed) << cmp->summary();
      else caught += !cmp->passed;
    }
  }
  EXPECT_GE(caught, 1) << "an early stage-2 release passed verification in all " << kAttempts << " attempts";
}

}  // namespace
}  // namespace ft::emu::test
