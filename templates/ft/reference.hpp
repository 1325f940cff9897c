#pragma once
// Reference kernels for verification: one output per thread, plain loops, fp32
// accumulation, no LDS and no matrix atoms, so they share no code path with the
// kernels they check. They read plain (unshuffled) weights and topk_ids directly
// instead of the sorted layout, so align/sort is checked too.
namespace ft {

// inter_ref[pair, n] = silu(x[t] . W1[e, n]) * (x[t] . W1[e, I + n]) (x routed
// weight when weight_in_stage1), rounded to the element type like stage 1 stores.
// Grid: (T * k, ceil(I / 256)): pairs along x, whose limit is 2^31 - 1 (y
// stops at 65535, fewer than the pairs of 16384 tokens at top-8).
template <Elem E>
FT_DEVICE void reference_stage1(const MoeArgs& p) {
  const int n = block_index_y() * kReferenceThreads + thread_index();
  const int pair = block_index_x();
  if (n >= p.inter_size) return;
  const long long H = p.hidden, I = p.inter_size;
  const int e = p.topk_ids[pair];
  float h = 0.0f;
  if (e >= 0 && e < p.experts) {
    const u16* x = p.x + (long long)(pair / p.topk) * H;
    const u16* gate_row = p.w1 + ((long long)e * 2 * I + n) * H;
    const u16* up_row = p.w1 + ((long long)e * 2 * I + I + n) * H;
    float gate = 0.0f, up = 0.0f;
    for (long long k = 0; k < H; ++k) {
      const float xv = to_f32<E>(x[k]);
      gate += xv * to_f32<E>(gate_row[k]);
      up += xv * to_f32<E>(up_row[k]);
    }
    h = silu(gate, exp_f32(-gate)) * up;
    if (p.flags & kFlagWeightInStage1) h *= p.topk_weights[pair];
  }
  p.inter[(long long)pair * I + n] = from_f32<E>(h);
}

// y[t, h] = sum over slots of (routed weight unless stage 1 applied it) x
// (inter[pair] . W2[e, h]). Deterministic: no atomics. Grid: (T, ceil(H / 256)).
template <Elem E>
FT_DEVICE void reference_stage2(const MoeArgs& p) {
  const int h = block_index_y() * kReferenceThreads + thread_index();
  const int t = block_index_x();
  if (h >= p.hidden) return;
  const long long H = p.hidden, I = p.inter_size;
  float y = 0.0f;
  for (int s = 0; s < p.topk; ++s) {
    const int pair = t * p.topk + s;
    const int e = p.topk_ids[pair];
    if (e < 0 || e >= p.experts) continue;
    const u16* a = p.inter + (long long)pair * I;
    const u16* w = p.w2 + ((long long)e * H + h) * I;
    float acc = 0.0f;
    for (long long k = 0; k < I; ++k) acc += to_f32<E>(a[k]) * to_f32<E>(w[k]);
    y += (p.flags & kFlagWeightInStage1) ? acc : acc * p.topk_weights[pair];
  }
  p.y[(long long)t * H + h] = from_f32<E>(y);
}

}  // namespace ft
