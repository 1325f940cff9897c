#pragma once
// check-export's backward rows (check_export.hpp): a plan's backward run
// through the C API the way a training step runs it -- the saved tensors
// recomputed by ft_plan_backward_saved from the forward's inputs, then
// ft_plan_backward_launch on poisoned outputs and workspace -- against the
// fp32 CPU backward (measure/workload/backward_reference.hpp) of the same
// inputs. dX, dW1, dW2 and d(topk_weights) are each compared with the
// backward search's bounds (compare.hpp's 16-bit tolerance; d(topk_weights)'s
// relative to its terms, routed_weight_tolerance); a NaN or an
// unwritten element fails; the recomputed saved tensors are checked too.
#include <cstdint>
#include <string>

#include "flytune_runtime.h"
#include "runtime/check/check_export.hpp"
#include "runtime/check/layer_check.hpp"

namespace ft::check {

// The CPU reference's work above which a backward row is not checked (the
// multiply-adds of one pass over the layer, T*k*3*I*H, times the passes the
// reference makes): a few seconds on one core.
inline constexpr double kBackwardReferenceWork = 4e9;

// Why the backward's rows at `tokens` are not checked: its CPU reference is above
// kBackwardReferenceWork (a coverage note); empty when it is affordable.
std::string backward_unchecked(const ft_problem_shape& shape, int tokens);

// The backward's body (op::moe_backward; OperationCheck, layer_check.hpp):
// the saved tensors recomputed, then the backward launched on poisoned outputs
// and workspace, each gradient against the CPU backward.
CheckRow check_backward(PlannedRow& planned, ProblemWeights& weights, const RowStart& start);

}  // namespace ft::check
