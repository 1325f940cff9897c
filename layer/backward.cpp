#include "layer/backward.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "layer/operation.hpp"
#include "layer/program_parts.hpp"

namespace ft {

using namespace program_parts;

bool is_backward(Role r) { return op::moe_backward().grad_role(r) != nullptr; }

namespace {

// A role's index in the operation's order (the rows' order).
std::size_t role_index(const op::GradRole& g) { return std::size_t(&g - op::moe_backward().grad.data()); }

Status validate_backward(const LayerRecipe& r) {
  const Problem& p = r.problem;
  if (!r.target) return bad("no target");
  if (!r.stages.empty()) return bad("a backward recipe holds backward stages only (LayerRecipe::grad), not forward stage variants");
  if (r.grad.empty()) return bad("no backward stage");
  if (p.fp8()) return bad(fmt::format("the backward runs 16-bit layers; {} is {}", p.name, to_string(p.dtype)));
  const op::GradRole* before = nullptr;
  for (const GradStage& g : r.grad) {
    const BackwardVariant& v = g.kernel;
    const op::GradRole* row = op::moe_backward().grad_role(g.role);
    if (!row) return bad(fmt::format("{} is not a backward role", to_string(g.role)));
    if (!v.target || !v.atom) return bad(fmt::format("backward stage {} has no target or atom", to_string(g.role)));
    if (before == row) return bad(fmt::format("{} appears twice", to_string(g.role)));
    if (before && role_index(*before) > role_index(*row))
      return bad(fmt::format("{} after {}: the stages are out of the operation's order", to_string(g.role), to_string(before->launch)));
    before = row;
    if (v.target != r.target) return bad(fmt::format("{} is for {}, the layer for {}", v.name(), v.target->name, r.target->name));
    if (v.op != row->gemm)
      return bad(fmt::format("{} runs {}, the role {} takes {}", v.name(), to_string(v.op), to_string(g.role), to_string(row->gemm)));
    if (v.atom->dtype != p.dtype) return bad(fmt::format("{} is {}, the problem {}", v.name(), to_string(v.atom->dtype), to_string(p.dtype)));
    if (auto why = why_illegal_for(v, op::extent(row->m, p.hidden, p.inter), op::extent(row->n, p.hidden, p.inter))) return bad(fmt::format("{}: {}", v.name(), *why));
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

// Only the buffers the recipe's roles read or write keep their sizes, and
// those of the operation no role names (the align's routing and counter).
void keep_used(LayerProgram& prog, const LayerRecipe& r) {
  std::array<bool, kBufCount> named{}, used{}, listed{};
  for (Buf b : op::moe_backward().buffers) listed[std::size_t(b)] = true;
  for (const op::GradRole& row : op::moe_backward().grad) {
    const bool present = std::ranges::any_of(r.grad, [&](const GradStage& g) { return g.role == row.launch; });
    for (const std::vector<Buf>& list : {row.reads(), row.writes()})
      for (Buf b : list) {
        named[std::size_t(b)] = true;
        used[std::size_t(b)] = used[std::size_t(b)] || present;
      }
  }
  for (std::size_t i = 0; i < kBufCount; ++i)
    if (!listed[i] || (named[i] && !used[i])) prog.bytes[i] = 0;
}

Step clear_step(Buf b, std::uint64_t bytes) {
  Step s;
  s.op = Step::Op::memset_u32;
  s.name = "clear_" + std::string(to_string(b));
  s.buffer = b;
  s.count = bytes / 4;
  return s;
}

}  // namespace

Result<LayerProgram> build_backward_program(const LayerRecipe& r, int tokens) {
  FT_CHECK(validate_backward(r));
  const Problem& p = r.problem;
  LayerProgram prog = FT_TRY(start_program(p, tokens, FT_TRY(backward_align_block(r))));
  const MoeArgs args = base_args(p, tokens, prog.align_block, prog.max_padded_rows);
  push_align(prog, *r.target, p, args, r.wide_align ? align_form(p, tokens) : AlignForm::one_block);
  for (const GradStage& g : r.grad) {
    const op::GradRole& row = *op::moe_backward().grad_role(g.role);
    const int m = op::extent(row.m, p.hidden, p.inter), n = op::extent(row.n, p.hidden, p.inter);
    const LaunchShape shape = row.gemm == BackwardOp::wgrad ? kgrouped_launch(g.kernel, p.experts, m, n)
                                                            : dgrad_launch(g.kernel, prog.max_padded_rows, n);
    prog.steps.push_back(launch_step(std::string(to_string(g.role)), g.role, g.kernel.name(), shape, args));
  }
  size_buffers(prog, r);
  keep_used(prog, r);
  // The accumulators the roles' atomics add into are zeroed first, in the roles' order.
  std::vector<Step> clears;
  for (const GradStage& g : r.grad)
    if (const auto b = op::moe_backward().grad_role(g.role)->clears) clears.push_back(clear_step(*b, prog.bytes[std::size_t(*b)]));
  prog.steps.insert(prog.steps.begin(), clears.begin(), clears.end());
  return prog;
}

namespace {

// What both argument structs take alike: the sorted rows, the routing's sizes and the output columns.
template <class Args>
void fill_rows(Args& x, const StepArgs& a, int n) {
  x.sorted_ids = a.sorted_ids;
  x.block_experts = a.block_experts;
  x.padded_rows = a.padded_rows;
  x.pairs = a.tokens * a.topk;
  x.topk = a.topk;
  x.n = n;
  x.experts = a.experts;
  x.align_block = a.align_block;
}

// The StepArgs member a buffer's row binds (layer/buffers.def's member column).
void* step_pointer(const StepArgs& a, Buf b) {
  switch (b) {
#define FT_BUFFER(name, member, pointee, place, meaning, size) \
  case Buf::name: return const_cast<void*>(static_cast<const void*>(a.member));
#include "layer/buffers.def"
#undef FT_BUFFER
  }
  return nullptr;
}

// A row's operand into its argument struct's pointer (op::takes says which
// each struct has; the operation's test holds every row to it).
void bind_operand(KGroupedArgs& k, op::Operand o, void* p) {
  switch (o) {
    case op::Operand::a: k.a = static_cast<const u16*>(p); return;
    case op::Operand::b: k.b = static_cast<const u16*>(p); return;
    case op::Operand::scales: k.a_scales = static_cast<const float*>(p); return;
    case op::Operand::c: k.c = static_cast<float*>(p); return;
    case op::Operand::c16: k.c16 = static_cast<u16*>(p); return;
    default: return;
  }
}

void bind_operand(DgradArgs& d, op::Operand o, void* p) {
  switch (o) {
    case op::Operand::a: d.a = static_cast<const u16*>(p); return;
    case op::Operand::w: d.w = static_cast<const u16*>(p); return;
    case op::Operand::scales: d.row_scales = static_cast<const float*>(p); return;
    case op::Operand::gate_up: d.gate_up = static_cast<const u16*>(p); return;
    case op::Operand::d_gate_up: d.d_gate_up = static_cast<u16*>(p); return;
    case op::Operand::d_weights: d.d_weights = static_cast<float*>(p); return;
    case op::Operand::dx: d.dx = static_cast<float*>(p); return;
    default: return;
  }
}

}  // namespace

BackwardKernelArgs backward_kernel_args(Role r, const StepArgs& a) {
  BackwardKernelArgs out;
  const op::GradRole& row = *op::moe_backward().grad_role(r);
  const int m = op::extent(row.m, a.hidden, a.inter_size), n = op::extent(row.n, a.hidden, a.inter_size);
  if (row.gemm == BackwardOp::wgrad) {
    KGroupedArgs& k = out.kgrouped;
    out.is_kgrouped = true;
    for (const op::Binding& b : row.operands) bind_operand(k, b.operand, step_pointer(a, b.buffer));
    fill_rows(k, a, n);
    k.m = m;
    k.a_per_token = row.a_per_token ? 1 : 0;
    k.b_per_token = row.b_per_token ? 1 : 0;
    return out;
  }
  DgradArgs& d = out.dgrad;
  for (const op::Binding& b : row.operands) bind_operand(d, b.operand, step_pointer(a, b.buffer));
  fill_rows(d, a, n);
  d.k = m;
  d.a_per_token = row.a_per_token ? 1 : 0;
  return out;
}

}  // namespace ft
