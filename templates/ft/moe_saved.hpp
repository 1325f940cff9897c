#pragma once
// The tensors the backward reads of the forward (docs/TRAINING.md), recomputed
// from X, the routing and W1 for a caller whose forward did not keep them
// (the runtime's ft_plan_backward_saved; docs/EXPORT.md): for each pair
// p = t*k + s routed to e in [0, E)
//   gate_up[p] = [W1_e[0:I] x_t ; W1_e[I:2I] x_t],  inter[p] = silu(g) * u (unweighted),
// each rounded to the element type as a forward stage stores it; a pair
// without an expert (-1, or an id outside [0, E)) gets rows of zeros. Plain
// loops and fp32 sums, one (pair, column) per thread, like the reference
// kernels: correct, not fast -- a forward that writes them as it runs is the
// fast path (docs/TRAINING.md). Grid: (T * k, ceil(I / kReferenceThreads)).
namespace ft {

template <Elem E>
FT_DEVICE void forward_saved(const SavedArgs& p) {
  const int n = block_index_y() * kReferenceThreads + thread_index();
  const int pair = block_index_x();
  if (n >= p.inter_size) return;
  const long long H = p.hidden, I = p.inter_size;
  const int e = p.topk_ids[pair];
  float gate = 0.0f, up = 0.0f, h = 0.0f;
  if (e >= 0 && e < p.experts) {
    const u16* x = p.x + (long long)(pair / p.topk) * H;
    const u16* gate_row = p.w1 + ((long long)e * 2 * I + n) * H;
    const u16* up_row = p.w1 + ((long long)e * 2 * I + I + n) * H;
    for (long long k = 0; k < H; ++k) {
      const float xv = to_f32<E>(x[k]);
      gate += xv * to_f32<E>(gate_row[k]);
      up += xv * to_f32<E>(up_row[k]);
    }
    h = silu(gate, exp_f32(-gate)) * up;
  }
  p.gate_up[(long long)pair * 2 * I + n] = from_f32<E>(gate);
  p.gate_up[(long long)pair * 2 * I + I + n] = from_f32<E>(up);
  p.inter[(long long)pair * I + n] = from_f32<E>(h);
}

}  // namespace ft
