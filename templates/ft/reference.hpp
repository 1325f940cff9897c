#pragma once
// Reference kernels for verification: one output per thread, plain loops, fp32
// accumulation, no LDS and no matrix atoms, so they share no code path with the
// kernels they check. They read plain (unshuffled) weights and topk_ids directly
// instead of the sorted layout, so align/sort is checked too.
namespace ft {

// Column n of token t's gate and up pre-activations under expert e: x[t] .
// W1[e, n] and x[t] . W1[e, I + n], fp32 sums of 16-bit values (the stage-1
// reference and moe_saved.hpp's forward_saved).
struct GateUp {
  float gate, up;
};
template <Elem E>
FT_DEVICE GateUp gate_up_of(const u16* x, const u16* w1, long long t, long long e, long long n, long long H, long long I) {
  const u16* xt = x + t * H;
  const u16* gate_row = w1 + (e * 2 * I + n) * H;
  const u16* up_row = w1 + (e * 2 * I + I + n) * H;
  GateUp g{0.0f, 0.0f};
  for (long long k = 0; k < H; ++k) {
    const float xv = to_f32<E>(xt[k]);
    g.gate += xv * to_f32<E>(gate_row[k]);
    g.up += xv * to_f32<E>(up_row[k]);
  }
  return g;
}

// inter_ref[pair, n] = silu(x[t] . W1[e, n]) * (x[t] . W1[e, I + n]) (x routed
// weight when weight_in_stage1), rounded to the element type like stage 1 stores.
// Grid: (T * k, ceil(I / 256)): pairs along x, whose limit is 2^31 - 1 (y
// stops at 65535, fewer than the pairs of 16384 tokens at top-8).
template <Elem E>
FT_DEVICE void reference_stage1(const MoeArgs& p) {
  const int n = block_index_y() * kReferenceThreads + thread_index();
  const int pair = block_index_x();
  if (n >= p.inter_size) return;
  const int e = p.topk_ids[pair];
  float h = 0.0f;
  if (e >= 0 && e < p.experts) {
    const GateUp g = gate_up_of<E>(p.x, p.w1, pair / p.topk, e, n, p.hidden, p.inter_size);
    h = silu(g.gate, exp_f32(-g.gate)) * g.up;
    if (p.flags & kFlagWeightInStage1) h *= p.topk_weights[pair];
  }
  p.inter[(long long)pair * p.inter_size + n] = from_f32<E>(h);
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

// --- fp8 layers --------------------------------------------------------------
// The same layer in fp32 from the dequantised values the kernels see: X
// quantised by the layer's rule (numeric.hpp's scale and encoding, applied by
// these loops, not by moe_quantise.hpp), W1 and W2 codes times their scales
// (weight_scale_index, moe_args.hpp), and the intermediate quantised by its
// rule (1 x 128 groups; with kFlagInterRowScales, flags bit 2, one scale per
// row in each of its group slots; static: the caller's inter_scale in every
// slot) before stage 2 reads it. Q is the target's e4m3.
//   reference_stage1_fp8:   the fp32 intermediate into y_acc [T*k, I]   grid as reference_stage1
//   reference_quantise_fp8: y_acc -> inter_q, inter_scales              grid (T*k, ceil(I/128/256))
//   reference_stage2_fp8:   y [T, H] in bf16                            grid as reference_stage2
// With kFlagUnquantised (flags bit 1) stage 1 reads X unquantised and stage 2
// the fp32 intermediate in y_acc rounded to bf16 (no reference_quantise_fp8):
// the bf16 layer on the dequantised weights, the fp8 layer's sanity reference.

// The scale of X row `x` [H] for the 128 values from k0 (per-tensor: the caller's;
// per-token: of the whole row; block128: of those 128).
template <Elem Q>
FT_DEVICE float reference_x_scale(const MoeArgs& p, const u16* x, long long k0, float row_scale) {
  const Scales mode = Scales(p.scales);
  if (mode != Scales::block128) return row_scale;
  float m = 0.0f;
  for (long long k = k0; k < k0 + kScaleGroup; ++k) m = abs_max(m, bf16_to_f32(x[k]));
  return fp8_scale_of<Q>(m);
}

template <Elem Q>
FT_DEVICE void reference_stage1_fp8(const MoeArgs& p) {
  const int n = block_index_y() * kReferenceThreads + thread_index();
  const int pair = block_index_x();
  if (n >= p.inter_size) return;
  const long long H = p.hidden, I = p.inter_size;
  const Scales mode = Scales(p.scales);
  const int e = p.topk_ids[pair];
  float h = 0.0f;
  if (e >= 0 && e < p.experts) {
    const u16* x = p.x + (long long)(pair / p.topk) * H;
    float row_scale = tensor_scales(mode) ? p.x_scale[0] : 1.0f;
    if (mode == Scales::per_token) {
      float m = 0.0f;
      for (long long k = 0; k < H; ++k) m = abs_max(m, bf16_to_f32(x[k]));
      row_scale = fp8_scale_of<Q>(m);
    }
    const u8* w1 = reinterpret_cast<const u8*>(p.w1);
    const long long gate_row = (long long)e * 2 * I + n, up_row = gate_row + I;
    float gate = 0.0f, up = 0.0f;
    for (long long k0 = 0; k0 < H; k0 += kScaleGroup) {
      const float xs = reference_x_scale<Q>(p, x, k0, row_scale);
      const float gs = p.w1_scales[weight_scale_index(mode, e, n, k0, 2 * I, H)];
      const float us = p.w1_scales[weight_scale_index(mode, e, I + n, k0, 2 * I, H)];
      for (long long k = k0; k < k0 + kScaleGroup; ++k) {
        const float xv = (p.flags & kFlagUnquantised) ? bf16_to_f32(x[k]) : to_f32<Q>(fp8_quantise<Q>(bf16_to_f32(x[k]), xs)) * xs;
        gate += xv * (to_f32<Q>(w1[gate_row * H + k]) * gs);
        up += xv * (to_f32<Q>(w1[up_row * H + k]) * us);
      }
    }
    h = silu(gate, exp_f32(-gate)) * up;
    if (p.flags & kFlagWeightInStage1) h *= p.topk_weights[pair];
  }
  p.y_acc[(long long)pair * I + n] = h;
}

template <Elem Q>
FT_DEVICE void reference_quantise_fp8(const MoeArgs& p) {
  const long long row = block_index_x(), I = p.inter_size;
  const long long g = (long long)block_index_y() * kReferenceThreads + thread_index();
  if (g >= I / kScaleGroup) return;
  const float* v = p.y_acc + row * I + g * kScaleGroup;
  float m = 0.0f;
  if (p.flags & kFlagInterRowScales)  // one scale per row: the row's amax (each group's thread finds it)
    for (long long k = 0; k < I; ++k) m = abs_max(m, p.y_acc[row * I + k]);
  else
    for (int k = 0; k < kScaleGroup; ++k) m = abs_max(m, v[k]);
  // static: the caller's scale, whatever the amax (values beyond it saturate)
  const float scale = Scales(p.scales) == Scales::static_tensor ? p.inter_scale[0] : fp8_scale_of<Q>(m);
  for (int k = 0; k < kScaleGroup; ++k) p.inter_q[row * I + g * kScaleGroup + k] = fp8_quantise<Q>(v[k], scale);
  p.inter_scales[row * (I / kScaleGroup) + g] = scale;
}

template <Elem Q>
FT_DEVICE void reference_stage2_fp8(const MoeArgs& p) {
  const int h = block_index_y() * kReferenceThreads + thread_index();
  const int t = block_index_x();
  if (h >= p.hidden) return;
  const long long H = p.hidden, I = p.inter_size;
  const Scales mode = Scales(p.scales);
  const u8* w2 = reinterpret_cast<const u8*>(p.w2);
  float y = 0.0f;
  for (int s = 0; s < p.topk; ++s) {
    const int pair = t * p.topk + s;
    const int e = p.topk_ids[pair];
    if (e < 0 || e >= p.experts) continue;
    const u8* a = p.inter_q + (long long)pair * I;
    const float* a32 = p.y_acc + (long long)pair * I;  // kFlagUnquantised: the fp32 intermediate
    const u8* w = w2 + ((long long)e * H + h) * I;
    const bool exact = p.flags & kFlagUnquantised;
    float acc = 0.0f;
    for (long long k0 = 0; k0 < I; k0 += kScaleGroup) {
      const float as = exact ? 1.0f : p.inter_scales[(long long)pair * (I / kScaleGroup) + k0 / kScaleGroup];
      const float ws = p.w2_scales[weight_scale_index(mode, e, h, k0, H, I)];
      for (long long k = k0; k < k0 + kScaleGroup; ++k) {
        const float av = exact ? bf16_to_f32(f32_to_bf16(a32[k])) : to_f32<Q>(a[k]) * as;
        acc += av * (to_f32<Q>(w[k]) * ws);
      }
    }
    y += (p.flags & kFlagWeightInStage1) ? acc : acc * p.topk_weights[pair];
  }
  p.y[(long long)t * H + h] = f32_to_bf16(y);
}

}  // namespace ft
