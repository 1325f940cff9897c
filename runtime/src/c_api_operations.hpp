#pragma once
// The C API's calls by operation (flytune_runtime.h): each operation of the
// registry (layer/operation.hpp) is a row -- the forward layer's
// (ft_plan_launch, ft_plan_bucket), its backward's (ft_plan_backward_launch,
// ft_plan_backward_bucket, ft_plan_has_backward) -- and those calls are one
// path over the table (runtime/src/c_api.cpp: launch_operation,
// operation_bucket), so a new operation's calls are a row and a line each.
// Internal to the library: nothing here is exported (flytune_runtime.map).
#include <cstddef>
#include <span>

#include "base/error.hpp"
#include "device/device.hpp"
#include "layer/operation.hpp"
#include "runtime/src/runtime_impl.hpp"

namespace ft::rt {

struct PlanOperation {
  const op::Operation& (*operation)();
  const char* launch;   // the C call that launches it, which starts its errors: "ft_plan_launch"
  const char* buffers;  // the name of that call's buffers argument: "buffers" (ft_layer_buffers), "grads" (ft_layer_grads)
  // The operation's plan within a plan (its bucket, program, functions); null where the plan has none.
  const OperationPlan* (*plan_of)(const Plan& plan);
  // The launch on `rt` from the caller's C struct of `size` bytes (read by that
  // size: c_structs.hpp), its errors as the runtime gives them.
  Status (*launch_sized)(Runtime& rt, const Plan& plan, const void* buffers, std::size_t size, StreamHandle stream);
};
// One row per operation of op::operations(), in its order.
std::span<const PlanOperation> plan_operations();
// The row of an operation; null when it has none.
const PlanOperation* plan_operation(const op::Operation& operation);

}  // namespace ft::rt
