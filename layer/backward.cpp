#include "layer/backward.hpp"

#include <algorithm>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "layer/program_parts.hpp"

namespace ft {

using namespace program_parts;

BackwardOp backward_op_of(Role r) {
  switch (r) {
    case Role::dgrad2: return BackwardOp::dgrad_swiglu;
    case Role::dgrad1: return BackwardOp::dgrad_scatter;
    default: break;
  }
  return BackwardOp::wgrad;
}

std::pair<int, int> backward_gemm_dims(Role r, const Problem& p) {
  return r == Role::dgrad1 || r == Role::wgrad1 ? std::pair{2 * p.inter, p.hidden} : std::pair{p.hidden, p.inter};
}

bool is_backward(Role r) { return r == Role::dgrad2 || r == Role::dgrad1 || r == Role::wgrad2 || r == Role::wgrad1; }

namespace {

Status validate_backward(const LayerRecipe& r) {
  const Problem& p = r.problem;
  if (!r.target) return bad("no target");
  if (!r.stages.empty()) return bad("a backward recipe holds backward stages only (LayerRecipe::grad), not forward stage variants");
  if (r.grad.empty()) return bad("no backward stage");
  if (p.fp8()) return bad(fmt::format("the backward runs 16-bit layers; {} is {}", p.name, to_string(p.dtype)));
  for (std::size_t i = 0; i < r.grad.size(); ++i) {
    const GradStage& g = r.grad[i];
    const BackwardVariant& v = g.kernel;
    if (!is_backward(g.role)) return bad(fmt::format("{} is not a backward role", to_string(g.role)));
    if (!v.target || !v.atom) return bad(fmt::format("backward stage {} has no target or atom", to_string(g.role)));
    if (i > 0 && r.grad[i - 1].role >= g.role)
      return bad(fmt::format("{} after {}: the stages are out of the operation's order", to_string(g.role), to_string(r.grad[i - 1].role)));
    if (v.target != r.target) return bad(fmt::format("{} is for {}, the layer for {}", v.name(), v.target->name, r.target->name));
    if (v.op != backward_op_of(g.role))
      return bad(fmt::format("{} runs {}, the role {} takes {}", v.name(), to_string(v.op), to_string(g.role),
                             to_string(backward_op_of(g.role))));
    if (v.atom->dtype != p.dtype) return bad(fmt::format("{} is {}, the problem {}", v.name(), to_string(v.atom->dtype), to_string(p.dtype)));
    const auto [m, n] = backward_gemm_dims(g.role, p);
    if (auto why = why_illegal_for(v, m, n)) return bad(fmt::format("{}: {}", v.name(), *why));
  }
  return {};
}

// The dgrad stages' tiles never straddle two experts: the row block is a multiple of their tile_m.
Result<int> backward_align_block(const LayerRecipe& r) {
  int block = 16;
  for (const GradStage& g : r.grad)
    if (g.kernel.op != BackwardOp::wgrad) block = std::lcm(block, g.kernel.tile_m);
  if (block > kMaxAlignBlock)
    return bad(fmt::format("the dgrad tiles need expert blocks of {} rows, more than {}", block, kMaxAlignBlock));
  return block;
}

const GradStage* grad_stage(const LayerRecipe& r, Role role) {
  for (const GradStage& g : r.grad)
    if (g.role == role) return &g;
  return nullptr;
}

Step clear_step(const char* name, Buf b, std::uint64_t words) {
  Step s;
  s.op = Step::Op::memset_u32;
  s.name = name;
  s.buffer = b;
  s.count = words;
  return s;
}

}  // namespace

Result<LayerProgram> build_backward_program(const LayerRecipe& r, int tokens) {
  FT_CHECK(validate_backward(r));
  if (tokens < 1 || tokens > kMaxTokens) return bad(fmt::format("token count {} outside 1..{}", tokens, kMaxTokens));
  const Problem& p = r.problem;
  LayerProgram prog;
  prog.tokens = tokens;
  prog.align_block = FT_TRY(backward_align_block(r));
  prog.max_padded_rows = max_padded_rows(p, tokens, prog.align_block);
  const long long pairs = (long long)tokens * p.topk;
  if (std::max(prog.max_padded_rows, pairs) > std::numeric_limits<int>::max())  // pairs and rows are 32-bit kernel arguments
    return bad(fmt::format("T={} with {} experts, top-{}: sizes overflow the kernels' 32-bit arguments", tokens, p.experts, p.topk));
  const MoeArgs args = base_args(p, tokens, prog.align_block, prog.max_padded_rows);
  if (grad_stage(r, Role::dgrad2)) prog.steps.push_back(clear_step("clear_d_weights", Buf::d_weights, std::uint64_t(pairs)));
  if (grad_stage(r, Role::dgrad1))
    prog.steps.push_back(clear_step("clear_dx", Buf::dx, std::uint64_t(tokens) * std::uint64_t(p.hidden)));
  push_align(prog, *r.target, p, args, r.wide_align ? align_form(p, tokens) : AlignForm::one_block);
  for (const GradStage& g : r.grad) {
    const auto [m, n] = backward_gemm_dims(g.role, p);
    const LaunchShape shape = g.kernel.op == BackwardOp::wgrad ? kgrouped_launch(g.kernel, p.experts, m, n)
                                                               : dgrad_launch(g.kernel, prog.max_padded_rows, n);
    prog.steps.push_back(launch_step(std::string(to_string(g.role)), g.role, g.kernel.name(), shape, args));
  }
  size_buffers(prog, r);
  return prog;
}

BackwardKernelArgs backward_kernel_args(Role r, const StepArgs& a) {
  BackwardKernelArgs out;
  const int pairs = a.tokens * a.topk, H = a.hidden, I = a.inter_size;
  if (r == Role::wgrad2 || r == Role::wgrad1) {
    KGroupedArgs& k = out.kgrouped;
    out.is_kgrouped = true;
    const bool w2 = r == Role::wgrad2;
    k.a = w2 ? a.dy : a.d_gate_up;
    k.b = w2 ? a.saved_inter : a.x;
    k.a_scales = w2 ? a.topk_weights : nullptr;  // dW2 takes the routed rows of dY, w_p dY_t
    k.c = w2 ? a.dw2 : a.dw1;
    k.sorted_ids = a.sorted_ids;
    k.block_experts = a.block_experts;
    k.padded_rows = a.padded_rows;
    k.pairs = pairs;
    k.topk = a.topk;
    k.m = w2 ? H : 2 * I;
    k.n = w2 ? I : H;
    k.experts = a.experts;
    k.align_block = a.align_block;
    k.a_per_token = w2 ? 1 : 0;
    k.b_per_token = w2 ? 0 : 1;
    return out;
  }
  DgradArgs& d = out.dgrad;
  const bool s2 = r == Role::dgrad2;
  d.a = s2 ? a.dy : a.d_gate_up;
  d.w = s2 ? a.w2 : a.w1;
  d.row_scales = s2 ? a.topk_weights : nullptr;
  d.gate_up = s2 ? a.saved_gate_up : nullptr;
  d.d_gate_up = s2 ? a.d_gate_up : nullptr;
  d.d_weights = s2 ? a.d_weights : nullptr;
  d.dx = s2 ? nullptr : a.dx;
  d.sorted_ids = a.sorted_ids;
  d.block_experts = a.block_experts;
  d.padded_rows = a.padded_rows;
  d.pairs = pairs;
  d.topk = a.topk;
  d.k = s2 ? H : 2 * I;
  d.n = s2 ? I : H;
  d.experts = a.experts;
  d.align_block = a.align_block;
  d.a_per_token = s2 ? 1 : 0;
  return out;
}

}  // namespace ft
