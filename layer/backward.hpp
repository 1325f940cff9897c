#pragma once
// The backward pass of the MoE layer as a program (op::moe_backward in
// layer/operation.hpp, whose rows give each role's GEMM, sizes, buffers and
// cleared accumulator; the math and the kernels: docs/TRAINING.md). From the
// backward stages of a recipe (LayerRecipe::grad: a backward GEMM
// configuration per role, generator/backward_gemm.hpp) and T it builds the
// launch sequence, run by layer/execute.hpp like the forward's:
//   clear_d_weights, clear_dx   zeros for the fp32 atomics (with the stage that adds into them)
//   align (or the wide align)   the forward's sorted rows, rebuilt from topk_ids
//   dgrad2   [dgate; dup] = SwiGLU'(w dY W2_e) into d_gate_up, d(topk_weights)
//   dgrad1   dX += d_gate_up W1_e (the top-k scatter-add)
//   wgrad2   dW2_e = (w dY)_e^T saved_inter_e    (K-grouped over each expert's rows)
//   wgrad1   dW1_e = d_gate_up_e^T X_e
// Its buffers are rows of layer/buffers.def (dy, saved_gate_up, saved_inter,
// d_gate_up, d_weights, dx, dw1, dw2 beside x, the routing and the plain
// weights); a program sizes only those its roles read or write, and the
// align's. A recipe may hold some of the stages (the search verifies and
// times one at a time): a program of dgrad1 or wgrad1 alone reads the
// d_gate_up it is given.
#include <cstddef>

#include "layer/program.hpp"

namespace ft {

// Whether a launch role is one of the backward's (op::moe_backward's rows).
bool is_backward(Role r);

// Errc::invalid_input for a recipe the backward cannot run (forward stages in
// it, an fp8 problem, a role that is not the backward's or appears twice,
// roles out of order, a stage of another op, target or dtype, a configuration
// its GEMM's sizes do not fit) or T outside 1..kMaxTokens.
// The row block is the least common multiple of the dgrad stages' tile_m and
// 16, at most kMaxAlignBlock.
Result<LayerProgram> build_backward_program(const LayerRecipe& r, int tokens);

// A backward step's kernel argument from its bound StepArgs: an ft::DgradArgs
// (dgrad2, dgrad1) or ft::KGroupedArgs (wgrad2, wgrad1), by its GEMM
// (templates/ft/moe_backward_args.hpp); r is a backward role (is_backward).
// Its row of op::moe_backward gives the sizes, the buffer each pointer is
// bound to (GradRole::operands; the rest null, the align's rows in all) and
// the per-token flags; the routing's scalars are the step's.
struct BackwardKernelArgs {
  DgradArgs dgrad{};
  KGroupedArgs kgrouped{};
  bool is_kgrouped = false;
  const void* data() const { return is_kgrouped ? static_cast<const void*>(&kgrouped) : &dgrad; }
  std::size_t size() const { return is_kgrouped ? sizeof kgrouped : sizeof dgrad; }
};
BackwardKernelArgs backward_kernel_args(Role r, const StepArgs& a);

}  // namespace ft
