#pragma once
// The MoE layer's backward pass on the CPU: the reference every backward
// kernel is checked against (docs/TRAINING.md). Plain loops over real values
// (fp32 for verification; double for the finite-difference tests that check
// this code itself), no rounding to 16-bit anywhere, run on every core (the
// same sums in the same order whatever the thread count).
//
// The layer, for each (token t, slot s) pair p = t*k + s routed to expert
// e = ids[p] in [0, E) (any other id, -1 included, contributes nothing):
//   g = W1_e[0:I] x_t,  u = W1_e[I:2I] x_t,  h_p = silu(g) * u   (the intermediate, [I])
//   z_p = W2_e h_p  ([H]),   y_t = sum_s w_p z_p
// and its gradients given dY = dL/dy:
//   dw_p    = dY_t . z_p                                  d(topk_weights)  [T, k]
//   dz_p    = w_p dY_t                                    (the routed rows of dY)
//   dh_p    = W2_e^T dz_p                                 d(intermediate)  [T*k, I]
//   dg      = dh_p * u * silu'(g),  du = dh_p * silu(g)   silu'(g) = s(g) (1 + g (1 - s(g)))
//   dW2_e   = sum_{p in e} dz_p h_p^T                     [E, H, I]  (a K-grouped GEMM over e's pairs)
//   dW1_e   = sum_{p in e} [dg; du] x_t^T                 [E, 2I, H] (likewise)
//   dX_t    = sum_s W1_e^T [dg; du]                       [T, H]     (a scatter-add over the k slots)
#include <cstdint>
#include <span>
#include <vector>

#include "measure/workload/workload.hpp"

namespace ft {

struct MoeShape {
  long long tokens = 0, hidden = 0, inter = 0, experts = 0, topk = 0;
  long long pairs() const { return tokens * topk; }
};

// The layer's inputs as real values, row-major: x [T, H], w1 [E, 2I, H] (gate
// rows, then up rows), w2 [E, H, I], ids and weights [T, k].
template <class R>
struct MoeInputs {
  MoeShape shape;
  std::vector<R> x, w1, w2, weights;
  std::vector<std::int32_t> ids;
};

// What the backward produces, and the saved / intermediate tensors the
// backward kernels read and write (their buffers, docs/TRAINING.md).
template <class R>
struct MoeGradients {
  std::vector<R> dx;        // [T, H]
  std::vector<R> dw1;       // [E, 2I, H]
  std::vector<R> dw2;       // [E, H, I]
  std::vector<R> dweights;  // [T, k]; 0 for a slot without an expert
  std::vector<R> gate_up;   // [T*k, 2I] [g; u], the forward's pre-activations (the stage-2 backward reads them)
  std::vector<R> inter;     // [T*k, I]  h_p, unweighted (the forward's saved intermediate); 0 for an empty slot
  std::vector<R> d_inter;   // [T*k, I]  dh_p
  std::vector<R> d_gate_up; // [T*k, 2I] [dg; du], the stage-1 backward's operand
};

// y [T, H] in R.
template <class R>
std::vector<R> moe_forward(const MoeInputs<R>& in);

// Gradients of L = <dy, y> with respect to every input. dy: [T, H].
template <class R>
MoeGradients<R> moe_backward(const MoeInputs<R>& in, std::span<const R> dy);

// A 16-bit workload's tensors decoded to fp32 (not fp8 problems).
MoeInputs<float> decoded_inputs(const Workload& w);

extern template std::vector<float> moe_forward(const MoeInputs<float>&);
extern template std::vector<double> moe_forward(const MoeInputs<double>&);
extern template MoeGradients<float> moe_backward(const MoeInputs<float>&, std::span<const float>);
extern template MoeGradients<double> moe_backward(const MoeInputs<double>&, std::span<const double>);

}  // namespace ft
