// The backward's routed dgrad GEMMs (templates/ft/moe_dgrad.hpp) on the CPU
// emulator, against the fp32 backward reference (measure/workload/backward_reference.hpp):
//   the stage-2 backward: [dgate; dup] of every routed pair (W2 read transposed,
//     the routed weight and the SwiGLU backward in the epilogue, from the saved
//     gate and up pre-activations) and d(topk_weights) (routed_weight_tolerance);
//   the stage-1 backward: dX, the top-k scatter-add of dH W1_e (W1 read transposed).
// gfx942 / gfx950 / sm_90a (mma.sync and wgmma), bf16 and f16, single and
// ping-pong LDS or a cp.async ring, T = 1, 7, 33
// with an expert that gets no tokens and -1 slots, a grid over more rows than
// the padded ones, outputs poisoned (rows of unrouted pairs must stay so).
// A mutant whose atom reads the wrong k group must fail.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "generator/backward_gemm.hpp"
#include "layer/device_structs.hpp"
#include "measure/workload/compare.hpp"
#include "templates/ft/moe_backward_args.hpp"
#include "tests/emu/backward_support.hpp"
#include "tests/emu/emu_test_support.hpp"

namespace ft::emu::test {
namespace {

struct DCase {
  const char* target;
  const char* atom;
  int tile_m, tile_n, tile_k, warps_m, warps_n, stages;
  int size = 64;  // H = I of the layer
};

const DCase kCases[] = {
    {"gfx942", "mfma_f32_16x16x16_bf16", 32, 64, 32, 2, 2, 2},
    {"gfx942", "mfma_f32_32x32x8_f16", 32, 32, 16, 1, 1, 1},
    {"gfx950", "mfma_f32_16x16x32_bf16", 16, 64, 64, 1, 2, 2},
    {"sm_90a", "mma_m16n8k16_f32_bf16", 32, 64, 32, 2, 2, 2},
    {"sm_90a", "mma_m16n8k16_f32_f16", 16, 32, 16, 1, 2, 1},
    // The wgmma form (moe_dgrad_wgmma.hpp): A K-major, the weight MN-major.
    {"sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 64, 4, 1, 3},
    {"sm_90a", "wgmma_m64k16_f32_f16", 64, 64, 64, 4, 1, 4},
    {"sm_90a", "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 4, 128},  // two warpgroups
};

struct Results {
  Comparison d_gate_up, d_weights, dx;
  std::size_t unrouted_written = 0;  // elements of unrouted pairs' d_gate_up rows that lost their poison
};

// One dgrad launch over the layer's sorted rows (a grid two row blocks larger than the padded rows).
Status launch(Device& dev, FunctionHandle fn, const BackwardVariant& v, const Gradients& g, DgradArgs args, DeviceBuffer& ids,
              DeviceBuffer& blocks, DeviceBuffer& padded) {
  args.sorted_ids = device_pointer<const i32>(ids.ptr());
  args.block_experts = device_pointer<const i32>(blocks.ptr());
  args.padded_rows = device_pointer<const i32>(padded.ptr());
  args.pairs = int(g.w.pairs());
  args.topk = g.w.problem.topk;
  args.experts = g.w.problem.experts;
  args.align_block = g.align_block;
  const LaunchShape s = dgrad_launch(v, g.align.padded_rows + 2LL * g.align_block, args.n);
  FT_CHECK(dev.set_dynamic_shared(fn, s.lds_bytes));
  FT_CHECK(dev.launch(fn, Dim3{unsigned(s.grid_x), unsigned(s.grid_y), 1}, Dim3{unsigned(s.block), 1, 1}, s.lds_bytes, {}, &args,
                      sizeof args));
  return dev.synchronize();
}

// A unit and the entry to run from it.
struct Entry {
  KernelSource unit;
  std::string name;
};

Result<Results> check_dgrad(const BackwardVariant& swiglu, const BackwardVariant& scatter, const Entry& e2, const Entry& e1,
                            int tokens, int size = 64) {
  const DType d = swiglu.atom->dtype;
  const Gradients g = gradients_for(d, tokens, 2 * swiglu.tile_m, size);
  Loaded l = FT_TRY(load(*swiglu.target, e2.unit));
  Device& dev = *l.device;
  const FunctionHandle f2 = FT_TRY(dev.function(l.module, e2.name));
  const auto lib1 = FT_TRY(compile_emulated(e1.unit, *scatter.target, compile_options()));
  const ModuleHandle m1 = FT_TRY(l.device->load_library(lib1));
  const FunctionHandle f1 = FT_TRY(dev.function(m1, e1.name));
  const Problem& p = g.w.problem;
  const long long P = g.w.pairs(), H = p.hidden, I = p.inter;
  DeviceBuffer ids = FT_TRY(upload(dev, sorted_rows(g, g.align.padded_rows + 2 * g.align_block)));
  DeviceBuffer blocks = FT_TRY(upload(dev, g.align.block_experts));
  DeviceBuffer padded = FT_TRY(upload(dev, std::vector<std::int32_t>{g.align.padded_rows}));
  DeviceBuffer dy = FT_TRY(upload(dev, g.dy)), w2 = FT_TRY(upload(dev, g.w.w2)), w1 = FT_TRY(upload(dev, g.w.w1));
  DeviceBuffer weights = FT_TRY(upload(dev, g.w.topk_weights)), gate_up = FT_TRY(upload(dev, g.gate_up));
  DeviceBuffer dh_in = FT_TRY(upload(dev, g.d_gate_up));
  DeviceBuffer dh = FT_TRY(DeviceBuffer::allocate(dev, std::size_t(P * 2 * I) * 2));
  DeviceBuffer dw = FT_TRY(DeviceBuffer::allocate(dev, std::size_t(P) * 4));
  DeviceBuffer dx = FT_TRY(DeviceBuffer::allocate(dev, std::size_t(tokens * H) * 4));
  constexpr std::uint32_t kPoison16 = 0x7fc07fc0u;  // two 16-bit NaNs (bf16 and f16 alike: exponent all ones)
  FT_CHECK(dev.memset_u32(dh.ptr(), kPoison16, std::size_t(P * I)));
  FT_CHECK(dev.memset_u32(dw.ptr(), 0u, std::size_t(P)));
  FT_CHECK(dev.memset_u32(dx.ptr(), 0u, std::size_t(tokens * H)));

  DgradArgs a2{};
  a2.a = device_pointer<const u16>(dy.ptr());
  a2.w = device_pointer<const u16>(w2.ptr());
  a2.row_scales = device_pointer<const float>(weights.ptr());
  a2.gate_up = device_pointer<const u16>(gate_up.ptr());
  a2.d_gate_up = device_pointer<u16>(dh.ptr());
  a2.d_weights = device_pointer<float>(dw.ptr());
  a2.k = int(H);
  a2.n = int(I);
  a2.a_per_token = 1;
  FT_CHECK(launch(dev, f2, swiglu, g, a2, ids, blocks, padded));
  DgradArgs a1{};
  a1.a = device_pointer<const u16>(dh_in.ptr());
  a1.w = device_pointer<const u16>(w1.ptr());
  a1.dx = device_pointer<float>(dx.ptr());
  a1.k = int(2 * I);
  a1.n = int(H);
  FT_CHECK(launch(dev, f1, scatter, g, a1, ids, blocks, padded));

  std::vector<std::uint16_t> got_dh(std::size_t(P * 2 * I));
  std::vector<float> got_dw(static_cast<std::size_t>(P)), got_dx(static_cast<std::size_t>(tokens * H));
  FT_CHECK(dev.copy_to_host(got_dh.data(), dh.ptr(), got_dh.size() * 2));
  FT_CHECK(dev.copy_to_host(got_dw.data(), dw.ptr(), got_dw.size() * 4));
  FT_CHECK(dev.copy_to_host(got_dx.data(), dx.ptr(), got_dx.size() * 4));
  // The routed pairs' rows of d_gate_up against the reference; the others must be untouched.
  Results r;
  std::vector<std::uint16_t> routed;
  std::vector<float> routed_ref;
  for (long long q = 0; q < P; ++q) {
    const bool is_routed = g.w.topk_ids[std::size_t(q)] >= 0 && g.w.topk_ids[std::size_t(q)] < p.experts;
    for (long long c = 0; c < 2 * I; ++c) {
      const std::size_t at = std::size_t(q * 2 * I + c);
      if (is_routed) {
        routed.push_back(got_dh[at]);
        routed_ref.push_back(g.ref.d_gate_up[at]);
      } else if (got_dh[at] != 0x7fc0u) {
        ++r.unrouted_written;
      }
    }
  }
  r.d_gate_up = compare_output(routed, routed_ref, d);
  r.d_weights = compare_values(got_dw, g.ref.dweights, dweights_tolerance(g));
  r.dx = compare_values(got_dx, g.ref.dx, tolerance_for(d));
  return r;
}

BackwardVariant variant(const DCase& c, BackwardOp op) {
  return BackwardVariant{&target(c.target), find_atom(c.atom), c.tile_m, c.tile_n, c.tile_k, c.warps_m, c.warps_n, c.stages, op};
}

class EmuDgrad : public testing::TestWithParam<DCase> {};

TEST_P(EmuDgrad, StageGradientsMatchTheBackwardReference) {
  const BackwardVariant swiglu = variant(GetParam(), BackwardOp::dgrad_swiglu);
  const BackwardVariant scatter = variant(GetParam(), BackwardOp::dgrad_scatter);
  ASSERT_NE(swiglu.atom, nullptr);
  const Problem p = emu_problem("dgrad", swiglu.atom->dtype, GetParam().size, GetParam().size);
  ASSERT_FALSE(why_illegal_for(swiglu, p)) << *why_illegal_for(swiglu, p);
  ASSERT_FALSE(why_illegal_for(scatter, p)) << *why_illegal_for(scatter, p);
  auto u2 = emit_backward(swiglu), u1 = emit_backward(scatter);
  ASSERT_TRUE(u2 && u1);
  for (int tokens : {1, 7, 33}) {
    auto r = check_dgrad(swiglu, scatter, {*u2, swiglu.name()}, {*u1, scatter.name()}, tokens, GetParam().size);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_TRUE(r->d_gate_up.passed) << swiglu.name() << " T=" << tokens << " d_gate_up: " << r->d_gate_up.summary();
    EXPECT_TRUE(r->d_weights.passed) << swiglu.name() << " T=" << tokens << " d_weights: " << r->d_weights.summary();
    EXPECT_TRUE(r->dx.passed) << scatter.name() << " T=" << tokens << " dx: " << r->dx.summary();
    EXPECT_EQ(r->unrouted_written, 0u) << "T=" << tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(Atoms, EmuDgrad, testing::ValuesIn(kCases), [](const testing::TestParamInfo<DCase>& i) {
  return std::string(i.param.target) + "_" + i.param.atom + "_s" + std::to_string(i.param.stages) + "_w" +
         std::to_string(i.param.warps_m);
});

// The first configuration with an atom whose lanes load the next k group's A
// operand (tests/emu/units/dgrad_mutant.cpp) fails every gradient, by far.
TEST(EmuDgradMutation, BrokenAtomLayoutFails) {
  const BackwardVariant swiglu = variant(kCases[0], BackwardOp::dgrad_swiglu);
  const BackwardVariant scatter = variant(kCases[0], BackwardOp::dgrad_scatter);
  const KernelSource unit = unit_from_file("dgrad_mutant.cpp", {"ft_mutant_dgrad2_broken_atom", "ft_mutant_dgrad1_broken_atom"});
  for (int tokens : {7, 33}) {
    auto r = check_dgrad(swiglu, scatter, {unit, "ft_mutant_dgrad2_broken_atom"}, {unit, "ft_mutant_dgrad1_broken_atom"}, tokens);
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_GT(r->d_gate_up.rel_l2, 0.1) << "T=" << tokens << ": " << r->d_gate_up.summary();
    EXPECT_FALSE(r->d_weights.passed) << "T=" << tokens << ": " << r->d_weights.summary();
    EXPECT_GT(r->dx.rel_l2, 0.1) << "T=" << tokens << ": " << r->dx.summary();
  }
}

// The wgmma form with its weight operand read K-major (no transpose
// immediate; tests/emu/units/dgrad_wgmma_mutant.cpp) fails every gradient.
TEST(EmuDgradMutation, WgmmaWeightReadKMajorFails) {
  const DCase& c = kCases[5];
  ASSERT_STREQ(c.atom, "wgmma_m64k16_f32_bf16");
  const BackwardVariant swiglu = variant(c, BackwardOp::dgrad_swiglu);
  const BackwardVariant scatter = variant(c, BackwardOp::dgrad_scatter);
  const KernelSource unit =
      unit_from_file("dgrad_wgmma_mutant.cpp", {"ft_mutant_dgrad2_wgmma_b_layout", "ft_mutant_dgrad1_wgmma_b_layout"});
  auto r = check_dgrad(swiglu, scatter, {unit, "ft_mutant_dgrad2_wgmma_b_layout"}, {unit, "ft_mutant_dgrad1_wgmma_b_layout"}, 33);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_GT(r->d_gate_up.rel_l2, 0.1) << r->d_gate_up.summary();
  EXPECT_FALSE(r->d_weights.passed) << r->d_weights.summary();
  EXPECT_GT(r->dx.rel_l2, 0.1) << r->dx.summary();
}

}  // namespace
}  // namespace ft::emu::test
