// BackwardBench (measure/backward_bench.hpp), the backward search's verifier
// and timer, on the CPU emulator: the gfx942 bf16 program of
// backward_program_test.cpp (E = 4, H = I = 64, top-2) passes at T = 333 with
// one expert without tokens and at T = 7; the same program with the K-grouped
// GEMM's broken-atom mutant (tests/emu/units/kgrouped_mutant.cpp) in both
// wgrad roles fails, on dW2 and dW1 alone -- each with the weight gradients
// in fp32 and in the 16-bit type (WeightGrads); a timing is positive, and timing
// fresh inputs computes no CPU backward (their saved tensors by forward_saved).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "compile/compile.hpp"
#include "generator/backward_gemm.hpp"
#include "generator/emitter.hpp"
#include "layer/operation.hpp"
#include "measure/backward_bench.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

constexpr const char* kMutant = "ft_mutant_kgrouped_broken_atom";

struct Case {
  const char* label;
  bool broken_wgrad;              // both wgrad roles run the mutant
  WeightGrads grads;              // the form of dW1, dW2 bound, checked and timed
  std::vector<Buf> failing;       // the buffers that must fail; the others pass
};

const Case kCases[] = {
    {"as_built", false, WeightGrads::half, {}},
    {"as_built_f32", false, WeightGrads::f32, {}},
    {"wgrad_broken_atom", true, WeightGrads::half, {Buf::dw2_16, Buf::dw1_16}},
    {"wgrad_broken_atom_f32", true, WeightGrads::f32, {Buf::dw2, Buf::dw1}},
};

class EmuBackwardBench : public testing::TestWithParam<Case> {};

TEST_P(EmuBackwardBench, VerifiesAgainstTheCpuBackward) {
  const Case& c = GetParam();
  const Target& t = target("gfx942");
  Problem p = emu_problem("backward_bench", DType::bf16, 64, 64);
  p.routing = *Routing::parse("uniform");
  TargetBench& tb = TargetBench::of(t);
  CompileOptions co;
  co.backend = Backend::emulate;
  auto support = compile(emit_support(t, p.dtype), t, co);
  ASSERT_TRUE(support) << support.error().describe();
  auto bench = BackwardBench::create(tb.device(), p, t, support->binary);
  ASSERT_TRUE(bench) << bench.error().describe();
  EXPECT_EQ((*bench)->weight_grads(), WeightGrads::half) << "a search verifies and times what jax and torch ask for";
  (*bench)->set_weight_grads(c.grads);

  LayerRecipe r{&t, p, {}};
  RoleKernels k;
  const AtomInfo* atom = find_atom("mfma_f32_16x16x16_bf16");
  for (const op::GradRole& row : op::moe_backward().grad) {
    const bool wgrad = row.gemm == BackwardOp::wgrad;
    const BackwardVariant v = wgrad ? BackwardVariant{&t, atom, 64, 64, 32, 2, 2, 2, row.gemm}
                                    : BackwardVariant{&t, atom, 32, 64, 32, 2, 2, 2, row.gemm};
    r.grad.push_back({row.launch, v});
    auto unit = emit_backward(v);
    ASSERT_TRUE(unit) << unit.error().describe();
    auto f = wgrad && c.broken_wgrad ? tb.entry(unit_from_file("kgrouped_mutant.cpp", {kMutant}), kMutant)
                                     : tb.entry(*unit, v.name());
    ASSERT_TRUE(f) << f.error().describe();
    k.of(row.launch) = *f;
  }
  for (auto [tokens, empty] : std::vector<std::pair<int, int>>{{333, 1}, {7, 0}}) {
    ASSERT_TRUE((*bench)->set_inputs(tokens, 11, empty));
    auto check = (*bench)->check({r, k});
    ASSERT_TRUE(check) << check.error().describe();
    std::vector<Buf> checked;
    for (const auto& [b, cmp] : check->buffers) checked.push_back(b);
    const bool half = c.grads == WeightGrads::half;
    EXPECT_EQ(checked, (std::vector<Buf>{Buf::d_gate_up, Buf::d_weights, Buf::dx, half ? Buf::dw2_16 : Buf::dw2,
                                         half ? Buf::dw1_16 : Buf::dw1}));
    for (const auto& [b, cmp] : check->buffers) {
      const bool broken = std::ranges::find(c.failing, b) != c.failing.end();
      EXPECT_EQ(cmp.passed, !broken) << c.label << " T=" << tokens << " " << to_string(b) << ": " << cmp.summary();
    }
    EXPECT_EQ(check->passed(), c.failing.empty()) << check->summary();
    if (!c.failing.empty()) {
      EXPECT_TRUE(check->summary().starts_with("dw")) << check->summary();
    }
  }
  if (c.failing.empty()) {
    auto time = (*bench)->time({r, k}, {.warmup = 0, .reps = 2, .flush_l2 = false});
    ASSERT_TRUE(time) << time.error().describe();
    EXPECT_GT(time->total.median_us, 0.0);
    EXPECT_EQ(time->total.samples, 2);
    // The parts: the support steps, then each GEMM role in the program's order,
    // from events between the steps -- together the whole, repetition by repetition.
    std::vector<std::string> names;
    double sum = 0;
    for (const auto& [name, part] : time->parts) {
      names.push_back(name);
      EXPECT_EQ(part.samples, 2) << name;
      EXPECT_GE(part.median_us, 0.0) << name;
      sum += part.median_us;  // two samples: the median is their mean, so the medians add up
    }
    EXPECT_EQ(names, (std::vector<std::string>{"support", "dgrad2", "dgrad1", "wgrad2", "wgrad1"}));
    EXPECT_NEAR(sum, time->total.median_us, 1e-3 * time->total.median_us + 0.5);
    EXPECT_GT(time->part("wgrad1")->median_us, 0.0);
    // Fresh inputs timed first: the saved tensors come from forward_saved on
    // the device and the CPU backward is not computed; a verification of the
    // same inputs then computes it and passes.
    ASSERT_TRUE((*bench)->set_inputs(33, 12, 1));
    auto fresh = (*bench)->time({r, k}, {.warmup = 0, .reps = 1, .flush_l2 = false});
    ASSERT_TRUE(fresh) << fresh.error().describe();
    EXPECT_FALSE((*bench)->has_reference()) << "timing computed the CPU backward";
    auto after = (*bench)->verify({r, k});  // the ProgramBench's brief
    ASSERT_TRUE(after) << after.error().describe();
    EXPECT_TRUE(after->passed) << after->summary;
    EXPECT_TRUE((*bench)->has_reference());
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, EmuBackwardBench, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<Case>& i) { return std::string(i.param.label); });

}  // namespace
}  // namespace ft::emu::test
