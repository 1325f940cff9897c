#pragma once
// The tensors the backward reads of the forward (docs/TRAINING.md), recomputed
// from X, the routing and W1 for a caller whose forward did not keep them
// (the runtime's ft_plan_backward_saved; docs/EXPORT.md): for each pair
// p = t*k + s routed to e in [0, E)
//   gate_up[p] = [W1_e[0:I] x_t ; W1_e[I:2I] x_t],  inter[p] = silu(g) * u (unweighted),
// each rounded to the element type as a forward stage stores it; a pair
// without an expert (-1, or an id outside [0, E)) gets rows of zeros. Plain
// loops and fp32 sums (reference.hpp's gate_up_of), one (pair, column) per
// thread, like the reference kernels: correct, not fast -- a forward that
// writes them as it runs is the fast path (docs/TRAINING.md).
// Grid: (T * k, ceil(I / kReferenceThreads)), the stage-1 reference's.
namespace ft {

template <Elem E>
FT_DEVICE void forward_saved(const SavedArgs& p) {
  const int n = block_index_y() * kReferenceThreads + thread_index();
  const int pair = block_index_x();
  if (n >= p.inter_size) return;
  const long long I = p.inter_size;
  const int e = p.topk_ids[pair];
  GateUp g{0.0f, 0.0f};
  float h = 0.0f;
  if (e >= 0 && e < p.experts) {
    g = gate_up_of<E>(p.x, p.w1, pair / p.topk, e, n, p.hidden, I);
    h = silu(g.gate, exp_f32(-g.gate)) * g.up;
  }
  p.gate_up[(long long)pair * 2 * I + n] = from_f32<E>(g.gate);
  p.gate_up[(long long)pair * 2 * I + I + n] = from_f32<E>(g.up);
  p.inter[(long long)pair * I + n] = from_f32<E>(h);
}

}  // namespace ft
