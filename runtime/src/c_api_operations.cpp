// The C API's rows by operation (c_api_operations.hpp).
#include "runtime/src/c_api_operations.hpp"

#include "runtime/src/c_structs.hpp"

namespace ft::rt {
namespace {

// The launches of the rows: the caller's C struct as the runtime's, then the
// runtime's launch of the operation.
Status launch_forward(Runtime& rt, const Plan& plan, const void* buffers, std::size_t size, StreamHandle stream) {
  const LayerBuffers b = FT_TRY(buffers_of(static_cast<const ft_layer_buffers*>(buffers), size));
  return with_size_note(rt.launch(plan, b, stream), size);
}

Status launch_backward(Runtime& rt, const Plan& plan, const void* grads, std::size_t size, StreamHandle stream) {
  const GradBuffers g = FT_TRY(grads_of(static_cast<const ft_layer_grads*>(grads), size));
  return rt.launch_backward(plan, g, stream);
}

const OperationPlan* forward_of(const Plan& plan) { return &plan; }
const OperationPlan* backward_of(const Plan& plan) { return plan.backward ? &*plan.backward : nullptr; }

constexpr PlanOperation kPlanOperations[] = {
    {op::moe_forward, "ft_plan_launch", "buffers", forward_of, launch_forward},
    {op::moe_backward, "ft_plan_backward_launch", "grads", backward_of, launch_backward},
};

}  // namespace

std::span<const PlanOperation> plan_operations() { return kPlanOperations; }

const PlanOperation* plan_operation(const op::Operation& operation) {
  for (const PlanOperation& row : kPlanOperations)
    if (&row.operation() == &operation) return &row;
  return nullptr;
}

}  // namespace ft::rt
