// The backward through the runtime (runtime_impl.hpp, Runtime's backward
// members; the C API's ft_plan_backward_*): a plan's backward program at its
// T, from the problem's backward bucket (the bucket rule over the backward's
// buckets), executed by the layer program's executor like the forward; and
// the support unit's forward_saved for callers whose forward kept no saved
// tensors. No launch rule lives here.
#include <cstddef>

#include <fmt/format.h>

#include "layer/backward.hpp"
#include "layer/operation.hpp"
#include "runtime/src/runtime_impl.hpp"

namespace ft::rt {
namespace {

Result<const BackwardPlan*> backward_of(const Plan& plan) {
  if (!plan.backward)
    return fail(Errc::not_found, "the export has no backward of this problem: search it with flytune search --pass "
                                 "backward (or both) and export again", plan.problem->key);
  return &*plan.backward;
}

// The table of a backward launch: the caller's pointers, its workspace carved
// as the backward program places it (Errc::usage when it is too small).
Result<BufferTable> grad_table(const LayerProgram& program, const GradBuffers& b) {
  BufferTable t = caller_table(b);
  if (!b.workspace)
    return fail(Errc::usage, fmt::format("null layer buffers: workspace (the backward needs {} bytes: "
                                         "ft_plan_backward_workspace_bytes)", workspace_placement(program).total));
  FT_CHECK(carve_workspace(t, program, b.workspace, b.workspace_bytes, "the backward's workspace", "it needs",
                           "ft_plan_backward_workspace_bytes"));
  return t;
}

}  // namespace

Result<std::uint64_t> Runtime::backward_workspace_bytes(const Plan& plan, int tokens) const {
  const BackwardPlan* bw = FT_TRY(backward_of(plan));
  if (tokens == plan.tokens) return ft::workspace_placement(bw->program).total;
  auto program = op::moe_backward().build(bw->bucket->recipe, tokens);
  if (!program) return fail(Errc::usage, "backward: " + program.error().message, plan.problem->key);
  return ft::workspace_placement(*program).total;
}

// Kernels built before KGroupedArgs::c16 read no such field: they would write fp32 through a null dw1.
bool takes_dw16(const BackwardPlan& bw) { return bw.bucket->kgrouped_args_bytes >= offsetof(KGroupedArgs, c16) + sizeof(u16*); }

Status Runtime::launch_backward(const Plan& plan, const GradBuffers& b, StreamHandle stream) {
  const BackwardPlan* bw = FT_TRY(backward_of(plan));
  if ((b.dw1_16 || b.dw2_16) && !takes_dw16(*bw))
    return fail(Errc::not_found, "the export's backward kernels predate the 16-bit weight gradients (dw1_16, dw2_16): pass "
                                 "dw1 and dw2 (fp32), or search and export again with this flytune version", plan.problem->key);
  return run(*bw, FT_TRY(grad_table(bw->program, b)), stream);
}

Status Runtime::backward_saved(const Plan& plan, const GradBuffers& b, StreamHandle stream) {
  (void)FT_TRY(backward_of(plan));
  const FunctionHandle f = plan.support->fn(Support::forward_saved);
  if (!f.p)
    return fail(Errc::not_found, "the export's support unit has no forward_saved kernel (it predates it): export again with "
                                 "this flytune version", plan.problem->key);
  std::string missing;
  for (auto [name, p] : {std::pair{"x", b.x}, {"topk_ids", b.topk_ids}, {"w1", b.w1}, {"saved_gate_up", b.saved_gate_up},
                         {"saved_inter", b.saved_inter}})
    if (!p) missing += (missing.empty() ? "" : ", ") + std::string(name);
  if (!missing.empty()) return fail(Errc::usage, "null layer buffers: " + missing);
  const Problem& p = plan.problem->problem;
  SavedArgs a{device_pointer<const u16>(b.x), device_pointer<const i32>(b.topk_ids), device_pointer<const u16>(b.w1),
              device_pointer<u16>(b.saved_gate_up), device_pointer<u16>(b.saved_inter), plan.tokens, p.hidden, p.inter,
              p.experts, p.topk, 0};
  return launch_support(f, reference_launch(StageRole::stage1, p, plan.tokens), &a, sizeof a, stream);
}

}  // namespace ft::rt
