// The backward as a layer program (layer/backward.hpp, op::moe_backward) on
// the CPU emulator: build_backward_program's steps -- the clears, the support
// unit's align, dgrad2, dgrad1, wgrad2, wgrad1 -- run through layer/execute
// (the path a GPU takes) on NaN-poisoned outputs and workspace, and every
// buffer a role writes (the operation's rows) against the fp32 backward
// (measure/workload/backward_reference.hpp, moe_backward) with the bounds of
// dgrad_test.cpp. The layer: E = 4, H = I = 64, top-2, an expert without
// tokens, every fifth slot -1; T = 1, 7, 33. gfx942 bf16 (mfma, 256 threads)
// and sm_90a f16 (mma.sync, warps of 32), one configuration per role, the
// ones the dgrad and K-grouped tests compile. The same with the 16-bit weight
// gradients bound (dw1_16, dw2_16) and dw1, dw2 null. Mutants must fail: dgrad1
// reading the saved pre-activations instead of their gradients, a wgrad step
// (also with 16-bit dW) or a clear left out.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "generator/backward_gemm.hpp"
#include "generator/emitter.hpp"
#include "layer/backward.hpp"
#include "layer/execute.hpp"
#include "layer/operation.hpp"
#include "measure/backward_bench.hpp"
#include "measure/workload/compare.hpp"
#include "tests/emu/backward_support.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

struct Tiles {
  int tile_m, tile_n, tile_k, warps_m, warps_n, stages;
};

struct BCase {
  const char* label;
  const char* target;
  const char* atom;
  Tiles dgrad, wgrad;  // dgrad_test.cpp's and kgrouped_test.cpp's configurations
};

const BCase kCases[] = {
    {"gfx942_bf16", "gfx942", "mfma_f32_16x16x16_bf16", {32, 64, 32, 2, 2, 2}, {64, 64, 32, 2, 2, 2}},
    {"sm_90a_f16", "sm_90a", "mma_m16n8k16_f32_f16", {16, 32, 16, 1, 2, 1}, {32, 32, 16, 2, 2, 1}},
};

LayerRecipe recipe_for(const BCase& c, const Problem& p) {
  const Target& t = target(c.target);
  LayerRecipe r{&t, p, {}};
  for (const op::GradRole& row : op::moe_backward().grad) {
    const Tiles& s = row.gemm == BackwardOp::wgrad ? c.wgrad : c.dgrad;
    r.grad.push_back({row.launch, BackwardVariant{&t, find_atom(c.atom), s.tile_m, s.tile_n, s.tile_k, s.warps_m, s.warps_n,
                                                  s.stages, row.gemm}});
  }
  return r;
}

// How a run is broken (the mutants): a step left out, or one step bound to
// another buffer in place of one of its own.
struct Mutation {
  std::string skip;
  std::string misbound_step;
  Buf wanted = Buf::d_gate_up, given = Buf::d_gate_up;
};

// What the program left in the buffers its roles write.
struct Outputs {
  std::map<Buf, std::vector<float>> fp32;
  std::map<Buf, std::vector<std::uint16_t>> h16;  // the 16-bit weight gradients, where bound
  std::vector<std::uint16_t> d_gate_up;
};

constexpr std::uint32_t kPoison = 0xffffffffu;  // fp32 NaN, two 16-bit NaNs

Result<DeviceBuffer> input(Device& dev, Buf b, const Gradients& g, std::uint64_t bytes) {
  const Workload& w = g.w;
  switch (b) {
    case Buf::x: return upload(dev, w.x);
    case Buf::topk_ids: return upload(dev, w.topk_ids);
    case Buf::topk_weights: return upload(dev, w.topk_weights);
    case Buf::w1: return upload(dev, w.w1);
    case Buf::w2: return upload(dev, w.w2);
    case Buf::dy: return upload(dev, g.dy);
    case Buf::saved_gate_up: return upload(dev, g.gate_up);
    case Buf::saved_inter: return upload(dev, g.inter);
    default: break;
  }
  // Workspace and outputs: poisoned (sorted rows zeroed, as the forward's tests do).
  DeviceBuffer out = FT_TRY(DeviceBuffer::allocate(dev, bytes));
  const bool rows = b == Buf::sorted_ids || b == Buf::block_experts;
  FT_CHECK(dev.memset_u32(out.ptr(), rows ? 0u : kPoison, bytes / 4));
  return out;
}

// half: the 16-bit weight gradients (dw1_16, dw2_16) bound, dw1 and dw2 null; else the fp32 ones.
Result<Outputs> run_backward(const BCase& c, const Gradients& g, const Mutation& m = {}, bool half = false) {
  const LayerRecipe r = recipe_for(c, g.w.problem);
  LayerProgram prog = FT_TRY(build_backward_program(r, g.w.tokens));
  if (!m.skip.empty()) {
    const std::size_t i = prog.index_of(m.skip);
    if (i == prog.steps.size()) return fail(Errc::internal, "no step " + m.skip);
    prog.steps.erase(prog.steps.begin() + std::ptrdiff_t(i));
  }
  TargetBench& bench = TargetBench::of(*r.target);
  EmuDevice& dev = bench.device();
  const KernelSource support = emit_support(*r.target, r.problem.dtype);
  RoleKernels k;
  k.of(Role::align) = FT_TRY(bench.entry(support, align_entry(*r.target)));
  k.of(Role::align_count) = FT_TRY(bench.entry(support, align_count_entry(*r.target)));
  k.of(Role::align_scatter) = FT_TRY(bench.entry(support, align_scatter_entry(*r.target)));
  for (const GradStage& s : r.grad) k.of(s.role) = FT_TRY(bench.entry(FT_TRY(emit_backward(s.kernel)), s.kernel.name()));
  const std::vector<FunctionHandle> fns = FT_TRY(bind(prog, k));
  FT_CHECK(prepare(dev, prog, fns));

  std::map<Buf, DeviceBuffer> held;
  BufferTable table{};
  for (std::size_t i = 0; i < kBufCount; ++i) {
    if (!prog.bytes[i]) continue;
    if (half ? op::written_instead(Buf(i)).has_value() : op::stands_in(Buf(i))) continue;
    DeviceBuffer b = FT_TRY(input(dev, Buf(i), g, prog.bytes[i]));
    if (b.bytes() < prog.bytes[i]) return fail(Errc::internal, fmt::format("{}: {} bytes for {}", to_string(Buf(i)), b.bytes(), prog.bytes[i]));
    table[i] = b.ptr();
    held.emplace(Buf(i), std::move(b));
  }
  FT_CHECK(check_buffers(prog, table));
  if (m.misbound_step.empty()) {
    FT_CHECK(execute(dev, prog, fns, table, {}));
  } else {
    const std::size_t i = prog.index_of(m.misbound_step);
    BufferTable wrong = table;
    at(wrong, m.wanted) = at(table, m.given);
    FT_CHECK(execute(dev, prog, fns, table, {}, {.first = 0, .last = i}));
    FT_CHECK(execute(dev, prog, fns, wrong, {}, {.first = i, .last = i + 1}));
    FT_CHECK(execute(dev, prog, fns, table, {}, {.first = i + 1}));
  }
  FT_CHECK(dev.synchronize());

  Outputs out;
  for (Buf b : {Buf::d_weights, Buf::dx, Buf::dw1, Buf::dw2}) {
    if (!at(table, b)) continue;
    std::vector<float> v(prog.bytes[std::size_t(b)] / 4);
    FT_CHECK(dev.copy_to_host(v.data(), at(table, b), v.size() * 4));
    out.fp32[b] = std::move(v);
  }
  for (Buf b : {Buf::dw1_16, Buf::dw2_16}) {
    if (!at(table, b)) continue;
    std::vector<std::uint16_t> v(prog.bytes[std::size_t(b)] / 2);
    FT_CHECK(dev.copy_to_host(v.data(), at(table, b), v.size() * 2));
    out.h16[b] = std::move(v);
  }
  out.d_gate_up.resize(prog.bytes[std::size_t(Buf::d_gate_up)] / 2);
  FT_CHECK(dev.copy_to_host(out.d_gate_up.data(), at(table, Buf::d_gate_up), out.d_gate_up.size() * 2));
  return out;
}

struct Checked {
  std::map<Buf, Comparison> by_buffer;  // every buffer the operation's roles write
  std::size_t unrouted_written = 0;     // d_gate_up elements of unrouted pairs that lost their poison
};

Checked check(const Outputs& o, const Gradients& g) {
  const DType d = g.w.problem.dtype;
  Checked c;
  for (const op::GradRole& row : op::moe_backward().grad)
    for (Buf b : row.writes()) {
      if (const auto h = o.h16.find(b); h != o.h16.end()) {  // dw1_16, dw2_16 where bound
        c.by_buffer[b] = compare_output(h->second, reference_gradient(b, g.ref), d);
        continue;
      }
      if (b != Buf::d_gate_up) {
        if (const auto f = o.fp32.find(b); f != o.fp32.end())  // dw1, dw2: unbound where their 16-bit rows are
          c.by_buffer[b] = compare_values(f->second, reference_gradient(b, g.ref),
                                          b == Buf::d_weights ? dweights_tolerance(g) : tolerance_for(d));
        continue;
      }
      const RoutedCheck rc = check_d_gate_up(o.d_gate_up, g.ref.d_gate_up, g.w.topk_ids, g.w.problem);
      c.by_buffer[b] = rc.routed;
      c.unrouted_written += rc.unrouted_written;
    }
  return c;
}

// The layer of dgrad_test.cpp and kgrouped_test.cpp (an expert without tokens, -1 slots).
Gradients layer(const BCase& c, int tokens) {
  return gradients_for(find_atom(c.atom)->dtype, tokens, 16);
}

class EmuBackwardProgram : public testing::TestWithParam<BCase> {};

TEST_P(EmuBackwardProgram, GradientsMatchTheBackwardReference) {
  const BCase& c = GetParam();
  for (int tokens : {1, 7, 33}) {
    const Gradients g = layer(c, tokens);
    auto out = run_backward(c, g);
    ASSERT_TRUE(out) << out.error().describe();
    const Checked r = check(*out, g);
    EXPECT_EQ(r.by_buffer.size(), 5u) << "d_gate_up, d_weights, dx, dw2, dw1";
    for (const auto& [b, cmp] : r.by_buffer) EXPECT_TRUE(cmp.passed) << c.label << " T=" << tokens << " " << to_string(b) << ": " << cmp.summary();
    EXPECT_EQ(r.unrouted_written, 0u) << "T=" << tokens;
  }
}

// The same program with the weight gradients in the weights' type (ft_layer_grads' dw1_16, dw2_16):
// dw1 and dw2 null (check_buffers takes the 16-bit ones for them), every 16-bit element written.
TEST_P(EmuBackwardProgram, SixteenBitWeightGradientsMatchTheBackwardReference) {
  const BCase& c = GetParam();
  for (int tokens : {1, 33}) {
    const Gradients g = layer(c, tokens);
    auto out = run_backward(c, g, {}, true);
    ASSERT_TRUE(out) << out.error().describe();
    const Checked r = check(*out, g);
    EXPECT_EQ(r.by_buffer.size(), 5u) << "d_gate_up, d_weights, dx, dw2_16, dw1_16";
    EXPECT_TRUE(r.by_buffer.contains(Buf::dw1_16) && r.by_buffer.contains(Buf::dw2_16));
    for (const auto& [b, cmp] : r.by_buffer) EXPECT_TRUE(cmp.passed) << c.label << " T=" << tokens << " " << to_string(b) << ": " << cmp.summary();
    EXPECT_EQ(r.unrouted_written, 0u) << "T=" << tokens;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, EmuBackwardProgram, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<BCase>& i) { return std::string(i.param.label); });

// Broken programs fail where they are broken, and pass elsewhere.
struct Mutant {
  const char* label;
  Mutation mutation;
  std::vector<Buf> fails;
  bool poisoned;  // the broken buffers keep NaNs everywhere (else: finite and far off)
  bool half = false;  // with the 16-bit weight gradients bound
};

const Mutant kMutants[] = {
    {"dgrad1_reads_the_saved_pre_activations", {"", "dgrad1", Buf::d_gate_up, Buf::saved_gate_up}, {Buf::dx}, false},
    {"wgrad2_left_out", {"wgrad2", "", Buf::d_gate_up, Buf::d_gate_up}, {Buf::dw2}, true},
    {"wgrad1_left_out_16", {"wgrad1", "", Buf::d_gate_up, Buf::d_gate_up}, {Buf::dw1_16}, true, true},
    {"clear_dx_left_out", {"clear_dx", "", Buf::d_gate_up, Buf::d_gate_up}, {Buf::dx}, true},
};

class EmuBackwardProgramMutant : public testing::TestWithParam<Mutant> {};

TEST_P(EmuBackwardProgramMutant, FailsWhereItIsBroken) {
  const Mutant& m = GetParam();
  for (int tokens : {7, 33}) {
    const Gradients g = layer(kCases[0], tokens);
    auto out = run_backward(kCases[0], g, m.mutation, m.half);
    ASSERT_TRUE(out) << out.error().describe();
    const Checked r = check(*out, g);
    for (const auto& [b, cmp] : r.by_buffer) {
      const bool broken = std::ranges::find(m.fails, b) != m.fails.end();
      EXPECT_EQ(cmp.passed, !broken) << m.label << " T=" << tokens << " " << to_string(b) << ": " << cmp.summary();
      if (!broken) continue;
      if (m.poisoned) {
        EXPECT_EQ(cmp.nonfinite, cmp.count) << m.label << " T=" << tokens << " " << to_string(b);
      } else {
        EXPECT_EQ(cmp.nonfinite, 0u) << m.label << " T=" << tokens << " " << to_string(b);
        EXPECT_GT(cmp.rel_l2, 0.1) << m.label << " T=" << tokens << " " << to_string(b);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Programs, EmuBackwardProgramMutant, testing::ValuesIn(kMutants),
                         [](const testing::TestParamInfo<Mutant>& i) { return std::string(i.param.label); });

}  // namespace
}  // namespace ft::emu::test
