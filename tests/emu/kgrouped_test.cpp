// The backward's K-grouped GEMM (templates/ft/moe_kgrouped.hpp) on the CPU
// emulator: both weight gradients of a seeded layer -- dW2_e = (w dY)_e^T
// inter_e and dW1_e = dH_e^T X_e, each expert reducing over its own ragged
// rows through the sorted ids -- against the fp32 backward reference
// (measure/workload/backward_reference.hpp), for every 16-bit atom family of
// gfx942, gfx950 and sm_90a (mma.sync and wgmma), single and ping-pong LDS or a cp.async ring, at T = 1, 7, 33 (not a
// multiple of the tile) with an expert that gets no tokens, -1 slots and
// outputs poisoned with NaN. The 16-bit output (KGroupedArgs::c16, c null)
// of every configuration: within the 16-bit bound of the reference, every
// element written, and each the fp32 output's value rounded to the 16-bit
// type. A mutant whose atom reads the wrong k group must fail.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "device/device_buffer.hpp"
#include "generator/backward_gemm.hpp"
#include "layer/device_structs.hpp"
#include "measure/workload/backward_reference.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/reference.hpp"
#include "templates/ft/moe_backward_args.hpp"
#include "tests/emu/backward_support.hpp"
#include "tests/emu/emu_test_support.hpp"

namespace ft::emu::test {
namespace {

struct KCase {
  const char* target;
  const char* atom;
  int tile_m, tile_n, tile_k, warps_m, warps_n, stages;
  int align_block;  // rows per row block of sorted_ids: tile_k need not divide it
  int size = 64;    // H = I of the layer
};

const KCase kCases[] = {
    {"gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2, 16},
    {"gfx942", "mfma_f32_32x32x8_f16", 64, 32, 16, 2, 1, 1, 32},
    {"gfx950", "mfma_f32_16x16x32_bf16", 32, 64, 64, 1, 2, 2, 16},
    {"sm_90a", "mma_m16n8k16_f32_bf16", 64, 64, 32, 2, 2, 2, 16},
    {"sm_90a", "mma_m16n8k16_f32_f16", 32, 32, 16, 2, 2, 1, 64},
    // The wgmma form (moe_kgrouped_wgmma.hpp): operands MN-major in shared memory.
    {"sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 64, 4, 1, 3, 16},
    {"sm_90a", "wgmma_m64k16_f32_f16", 64, 64, 16, 4, 1, 4, 64},
    {"sm_90a", "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 4, 16, 128},  // two warpgroups
};

// One K-grouped launch C [E, m, n] on NaN-poisoned memory, returned to the
// host: fp32 (KGroupedArgs::c), or with `half` the 16-bit output (c16, and c
// null: the kernel must not touch it) in `h16`.
struct Operand {
  DevicePtr rows;
  bool per_token;
};
struct GemmOut {
  std::vector<float> f32;
  std::vector<std::uint16_t> h16;
};
Result<GemmOut> run_gemm(Loaded& l, const std::string& entry, const BackwardVariant& v, const Gradients& g, Operand a,
                         Operand b, DevicePtr a_scales, int m, int n, bool half = false) {
  Device& dev = *l.device;
  const Problem& p = g.w.problem;
  DeviceBuffer ids = FT_TRY(upload(dev, sorted_rows(g, 0)));
  DeviceBuffer blocks = FT_TRY(upload(dev, g.align.block_experts));
  DeviceBuffer padded = FT_TRY(upload(dev, std::vector<std::int32_t>{g.align.padded_rows}));
  const std::size_t count = std::size_t(p.experts) * std::size_t(m) * std::size_t(n);
  const std::size_t bytes = count * (half ? 2 : 4);
  DeviceBuffer c = FT_TRY(DeviceBuffer::allocate(dev, bytes));
  // NaN (fp32, or two 16-bit NaNs of either type a word): an element no block writes fails.
  FT_CHECK(dev.memset_u32(c.ptr(), half ? 0x7fc07fc0u : 0x7fc00000u, bytes / 4));
  KGroupedArgs args{};
  args.a = device_pointer<const u16>(a.rows);
  args.b = device_pointer<const u16>(b.rows);
  args.a_scales = device_pointer<const float>(a_scales);
  if (half) args.c16 = device_pointer<u16>(c.ptr());
  else args.c = device_pointer<float>(c.ptr());
  args.sorted_ids = device_pointer<const i32>(ids.ptr());
  args.block_experts = device_pointer<const i32>(blocks.ptr());
  args.padded_rows = device_pointer<const i32>(padded.ptr());
  args.pairs = int(g.w.pairs());
  args.topk = p.topk;
  args.m = m;
  args.n = n;
  args.experts = p.experts;
  args.align_block = g.align_block;
  args.a_per_token = a.per_token;
  args.b_per_token = b.per_token;
  const LaunchShape s = kgrouped_launch(v, p.experts, m, n);
  FunctionHandle fn = l.fn(entry);
  FT_CHECK(dev.set_dynamic_shared(fn, s.lds_bytes));
  FT_CHECK(dev.launch(fn, Dim3{unsigned(s.grid_x), unsigned(s.grid_y), unsigned(s.grid_z)}, Dim3{unsigned(s.block), 1, 1},
                      s.lds_bytes, {}, &args, sizeof args));
  FT_CHECK(dev.synchronize());
  GemmOut out;
  if (half) {
    out.h16.resize(count);
    FT_CHECK(dev.copy_to_host(out.h16.data(), c.ptr(), bytes));
  } else {
    out.f32.resize(count);
    FT_CHECK(dev.copy_to_host(out.f32.data(), c.ptr(), bytes));
  }
  return out;
}

struct Checked {
  Comparison dw2, dw1;
  // With the 16-bit output: elements that are not the fp32 output's value rounded to the 16-bit type.
  std::size_t dw2_unrounded = 0, dw1_unrounded = 0;
};

// The 16-bit output against the reference, and against the fp32 output `f32` of the same launch rounded.
Comparison compare_half(const GemmOut& h, const GemmOut& f32, std::span<const float> ref, DType d, std::size_t& unrounded) {
  for (std::size_t i = 0; i < h.h16.size(); ++i)
    if (h.h16[i] != f32_to_half(d, f32.f32[i])) ++unrounded;
  return compare_output(h.h16, ref, d);
}

// Both weight gradients of the layer at `tokens` through the kernel `entry` of
// `unit`: the fp32 output, or with `half` the 16-bit one (checked against the fp32's too).
Result<Checked> check_gradients(const BackwardVariant& v, const KernelSource& unit, const std::string& entry, int tokens,
                                int align_block, int size = 64, bool half = false) {
  const DType d = v.atom->dtype;
  const Gradients g = gradients_for(d, tokens, align_block, size);
  Loaded l = FT_TRY(load(*v.target, unit));
  Device& dev = *l.device;
  const Problem& p = g.w.problem;
  DeviceBuffer dy = FT_TRY(upload(dev, g.dy)), inter = FT_TRY(upload(dev, g.inter));
  DeviceBuffer dh = FT_TRY(upload(dev, g.d_gate_up)), x = FT_TRY(upload(dev, g.w.x));
  DeviceBuffer weights = FT_TRY(upload(dev, g.w.topk_weights));
  const Tolerance tol = tolerance_for(d);
  Checked out;
  // dW2_e [H, I] = sum over e's pairs of (w_p dY_t) inter_p^T.
  const Operand dy_rows{dy.ptr(), true}, inter_rows{inter.ptr(), false}, dh_rows{dh.ptr(), false}, x_rows{x.ptr(), true};
  const GemmOut dw2 = FT_TRY(run_gemm(l, entry, v, g, dy_rows, inter_rows, weights.ptr(), p.hidden, p.inter));
  // dW1_e [2I, H] = sum over e's pairs of [dg; du]_p x_t^T.
  const GemmOut dw1 = FT_TRY(run_gemm(l, entry, v, g, dh_rows, x_rows, 0, 2 * p.inter, p.hidden));
  if (!half) {
    out.dw2 = compare_values(dw2.f32, g.ref.dw2, tol);
    out.dw1 = compare_values(dw1.f32, g.ref.dw1, tol);
    return out;
  }
  const GemmOut dw2_16 = FT_TRY(run_gemm(l, entry, v, g, dy_rows, inter_rows, weights.ptr(), p.hidden, p.inter, true));
  const GemmOut dw1_16 = FT_TRY(run_gemm(l, entry, v, g, dh_rows, x_rows, 0, 2 * p.inter, p.hidden, true));
  out.dw2 = compare_half(dw2_16, dw2, g.ref.dw2, d, out.dw2_unrounded);
  out.dw1 = compare_half(dw1_16, dw1, g.ref.dw1, d, out.dw1_unrounded);
  return out;
}

class EmuKGrouped : public testing::TestWithParam<KCase> {};

TEST_P(EmuKGrouped, WeightGradientsMatchTheBackwardReference) {
  const KCase& c = GetParam();
  const BackwardVariant v{&target(c.target), find_atom(c.atom), c.tile_m, c.tile_n, c.tile_k, c.warps_m, c.warps_n, c.stages};
  ASSERT_NE(v.atom, nullptr) << c.atom;
  ASSERT_FALSE(why_illegal(v)) << *why_illegal(v);
  auto unit = emit_backward(v);
  ASSERT_TRUE(unit) << unit.error().describe();
  for (int tokens : {1, 7, 33}) {
    auto r = check_gradients(v, *unit, v.name(), tokens, c.align_block, c.size);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_TRUE(r->dw2.passed) << v.name() << " T=" << tokens << " dW2: " << r->dw2.summary();
    EXPECT_TRUE(r->dw1.passed) << v.name() << " T=" << tokens << " dW1: " << r->dw1.summary();
  }
}

// The 16-bit output (c16): the weight gradient in the weights' type, each
// element the fp32 output rounded (so within the 16-bit bound of the reference),
// every element written over NaN (an expert without tokens: zeros).
TEST_P(EmuKGrouped, SixteenBitOutputIsTheFp32OutputRounded) {
  const KCase& c = GetParam();
  const BackwardVariant v{&target(c.target), find_atom(c.atom), c.tile_m, c.tile_n, c.tile_k, c.warps_m, c.warps_n, c.stages};
  ASSERT_NE(v.atom, nullptr) << c.atom;
  auto unit = emit_backward(v);
  ASSERT_TRUE(unit) << unit.error().describe();
  for (int tokens : {1, 33}) {
    auto r = check_gradients(v, *unit, v.name(), tokens, c.align_block, c.size, true);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_TRUE(r->dw2.passed) << v.name() << " T=" << tokens << " dW2 (16-bit): " << r->dw2.summary();
    EXPECT_TRUE(r->dw1.passed) << v.name() << " T=" << tokens << " dW1 (16-bit): " << r->dw1.summary();
    EXPECT_EQ(r->dw2_unrounded, 0u) << v.name() << " T=" << tokens << " dW2: 16-bit values not the fp32 output rounded";
    EXPECT_EQ(r->dw1_unrounded, 0u) << v.name() << " T=" << tokens << " dW1: 16-bit values not the fp32 output rounded";
  }
}

INSTANTIATE_TEST_SUITE_P(Atoms, EmuKGrouped, testing::ValuesIn(kCases), [](const testing::TestParamInfo<KCase>& i) {
  return std::string(i.param.target) + "_" + i.param.atom + "_s" + std::to_string(i.param.stages) + "_w" +
         std::to_string(i.param.warps_m);
});

// The same configuration with an atom whose lanes load the A operand of the
// next k group (tests/emu/units/kgrouped_mutant.cpp) fails, by far.
TEST(EmuKGroupedMutation, BrokenAtomLayoutFails) {
  const BackwardVariant v{&target("gfx942"), find_atom("mfma_f32_16x16x16_bf16"), 64, 64, 32, 2, 2, 2};
  const KernelSource unit = unit_from_file("kgrouped_mutant.cpp", {"ft_mutant_kgrouped_broken_atom"});
  for (int tokens : {7, 33}) {
    auto r = check_gradients(v, unit, "ft_mutant_kgrouped_broken_atom", tokens, 16);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_FALSE(r->dw2.passed) << "T=" << tokens << ": " << r->dw2.summary();
    EXPECT_GT(r->dw1.rel_l2, 0.1) << "T=" << tokens << ": " << r->dw1.summary();
  }
}

// The wgmma form with its B operand read K-major (no transpose immediate;
// tests/emu/units/kgrouped_wgmma_mutant.cpp) fails: the emulator decodes the
// layout the instruction names, not the one the kernel meant.
TEST(EmuKGroupedMutation, WgmmaOperandReadKMajorFails) {
  const BackwardVariant v{&target("sm_90a"), find_atom("wgmma_m64k16_f32_bf16"), 64, 64, 64, 4, 1, 3};
  const KernelSource unit = unit_from_file("kgrouped_wgmma_mutant.cpp", {"ft_mutant_kgrouped_wgmma_b_layout"});
  auto r = check_gradients(v, unit, "ft_mutant_kgrouped_wgmma_b_layout", 33, 16);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_FALSE(r->dw2.passed) << r->dw2.summary();
  EXPECT_FALSE(r->dw1.passed) << r->dw1.summary();
}

}  // namespace
}  // namespace ft::emu::test
