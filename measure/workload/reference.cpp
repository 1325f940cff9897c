#include "measure/workload/reference.hpp"

#include <algorithm>
#include <cmath>

#include "measure/workload/half.hpp"
#include "measure/workload/parallel_for.hpp"

namespace ft {
namespace {

float decode(Elem f, std::uint8_t v) { return f == Elem::e4m3fnuz ? e4m3fnuz_to_f32(v) : e4m3_to_f32(v); }
std::uint8_t quantise(Elem f, float v, float scale) {
  return f == Elem::e4m3fnuz ? fp8_quantise<Elem::e4m3fnuz>(v, scale) : fp8_quantise<Elem::e4m3>(v, scale);
}
float scale_of(Elem f, float amax) { return f == Elem::e4m3fnuz ? fp8_scale_of<Elem::e4m3fnuz>(amax) : fp8_scale_of<Elem::e4m3>(amax); }

// Codes times scales of an [E, N, K] weight.
std::vector<float> dequantised_weights(const Workload& w, const std::vector<std::uint8_t>& q, const std::vector<float>& s,
                                       long long N, long long K) {
  std::vector<float> out(q.size());
  const Scales mode = w.problem.scales;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const long long k = (long long)i % K, n = (long long)i / K % N, e = (long long)i / K / N;
    out[i] = decode(w.fp8_format, q[i]) * s[std::size_t(weight_scale_index(mode, e, n, k, N, K))];
  }
  return out;
}

// Stage 1 in fp32 from X and W1 widened to fp32 (fp8 workloads: X dequantised
// or not, W1 dequantised): the intermediate [T*k, I], zero for pairs without an expert.
std::vector<float> stage1_f32(const Workload& w, const std::vector<float>& x, const std::vector<float>& w1,
                              bool weight_in_stage1, unsigned threads) {
  const Problem& p = w.problem;
  const long long T = w.tokens, H = p.hidden, I = p.inter, k = p.topk;
  std::vector<float> out(std::size_t(T * k * I), 0.0f);
  parallel_for(T * k, threads, [&](long long pair) {
    const long long t = pair / k, e = w.topk_ids[std::size_t(pair)];
    if (e < 0 || e >= p.experts) return;
    float* h = &out[std::size_t(pair * I)];
    const float* xr = &x[std::size_t(t * H)];
    for (long long i = 0; i < I; ++i) {
      const float* g = &w1[std::size_t((e * 2 * I + i) * H)];
      const float* u = &w1[std::size_t((e * 2 * I + I + i) * H)];
      float gate = 0, up = 0;
      for (long long c = 0; c < H; ++c) {
        gate += xr[c] * g[c];
        up += xr[c] * u[c];
      }
      h[i] = gate / (1.0f + std::exp(-gate)) * up;
      if (weight_in_stage1) h[i] *= w.topk_weights[std::size_t(pair)];
    }
  });
  return out;
}

ReferenceOutput reference_layer_fp8(const Workload& w, const ReferenceOptions& options) {
  const Problem& p = w.problem;
  const long long T = w.tokens, H = p.hidden, I = p.inter, k = p.topk, G = I / kScaleGroup;
  ReferenceOutput out;
  out.inter_q.assign(std::size_t(T * k * I), 0);
  out.inter_scales.assign(std::size_t(T * k * G), 1.0f);
  out.y.assign(std::size_t(T * H), 0.0f);
  out.y16.assign(std::size_t(T * H), 0);
  std::vector<float> x = dequantised_x(w);
  if (!options.quantise_activations)
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = bf16_bits_to_f32(w.x[i]);
  const std::vector<float> w1 = dequantised_weights(w, w.w1q, w.w1_scales, 2 * I, H);
  const std::vector<float> w2 = dequantised_weights(w, w.w2q, w.w2_scales, H, I);
  out.inter_f32 = stage1_f32(w, x, w1, options.weight_in_stage1, options.threads);
  const bool fixed = p.scales == Scales::static_tensor;
  parallel_for(T * k, options.threads, [&](long long pair) {
    const float* h = &out.inter_f32[std::size_t(pair * I)];
    // The intermediate's rule: 1 x 128 groups, or one scale per row (an unused row quantises to zeros),
    // or static: the workload's inter_scale in every slot (values beyond it saturate).
    float row_max = 0;
    if (options.inter_row_scales)
      for (long long c = 0; c < I; ++c) row_max = abs_max(row_max, h[c]);
    for (long long g = 0; g < G; ++g) {
      float m = row_max;
      if (!options.inter_row_scales)
        for (long long c = 0; c < kScaleGroup; ++c) m = abs_max(m, h[g * kScaleGroup + c]);
      const float s = fixed ? w.inter_scale.at(0) : scale_of(w.fp8_format, m);
      out.inter_scales[std::size_t(pair * G + g)] = s;
      for (long long c = 0; c < kScaleGroup; ++c)
        out.inter_q[std::size_t(pair * I + g * kScaleGroup + c)] = quantise(w.fp8_format, h[g * kScaleGroup + c], s);
    }
  });
  std::vector<float> a = dequantise_rows(out.inter_q, out.inter_scales, I, w.fp8_format);
  if (!options.quantise_activations)  // the bf16 layer's intermediate
    for (std::size_t i = 0; i < a.size(); ++i) a[i] = bf16_bits_to_f32(f32_to_bf16_bits(out.inter_f32[i]));
  parallel_for(T, options.threads, [&](long long t) {
    for (long long s = 0; s < k; ++s) {
      const long long pair = t * k + s, e = w.topk_ids[std::size_t(pair)];
      if (e < 0 || e >= p.experts) continue;
      const float scale = options.weight_in_stage1 ? 1.0f : w.topk_weights[std::size_t(pair)];
      for (long long c = 0; c < H; ++c) {
        const float* wr = &w2[std::size_t((e * H + c) * I)];
        float acc = 0;
        for (long long i = 0; i < I; ++i) acc += a[std::size_t(pair * I + i)] * wr[i];
        out.y[std::size_t(t * H + c)] += acc * scale;
      }
    }
    for (long long c = 0; c < H; ++c) out.y16[std::size_t(t * H + c)] = f32_to_bf16_bits(out.y[std::size_t(t * H + c)]);
  });
  return out;
}

}  // namespace

std::vector<float> dequantised_x(const Workload& w) {
  const Problem& p = w.problem;
  const long long T = w.tokens, H = p.hidden;
  std::vector<float> out(std::size_t(T * H));
  for (long long t = 0; t < T; ++t) {
    const std::uint16_t* row = &w.x[std::size_t(t * H)];
    float row_scale = tensor_scales(p.scales) ? w.x_scale.at(0) : 1.0f;
    if (p.scales == Scales::per_token) {
      float m = 0;
      for (long long c = 0; c < H; ++c) m = abs_max(m, bf16_bits_to_f32(row[c]));
      row_scale = scale_of(w.fp8_format, m);
    }
    for (long long g = 0; g < H; g += kScaleGroup) {
      float s = row_scale;
      if (p.scales == Scales::block128) {
        float m = 0;
        for (long long c = g; c < g + kScaleGroup; ++c) m = abs_max(m, bf16_bits_to_f32(row[c]));
        s = scale_of(w.fp8_format, m);
      }
      for (long long c = g; c < g + kScaleGroup; ++c)
        out[std::size_t(t * H + c)] = decode(w.fp8_format, quantise(w.fp8_format, bf16_bits_to_f32(row[c]), s)) * s;
    }
  }
  return out;
}

float calibrated_inter_scale(const Workload& w, unsigned threads) {
  const Problem& p = w.problem;
  const std::vector<float> w1 = dequantised_weights(w, w.w1q, w.w1_scales, 2 * p.inter, p.hidden);
  float m = 0;
  for (float v : stage1_f32(w, dequantised_x(w), w1, false, threads)) m = abs_max(m, v);
  return scale_of(w.fp8_format, m);
}

std::vector<float> dequantise_rows(std::span<const std::uint8_t> codes, std::span<const float> scales, long long K, Elem format) {
  std::vector<float> out(codes.size());
  for (std::size_t i = 0; i < codes.size(); ++i)
    out[i] = decode(format, codes[i]) * scales[i / std::size_t(K) * std::size_t(K / kScaleGroup) + i % std::size_t(K) / kScaleGroup];
  return out;
}

ReferenceOutput reference_layer(const Workload& w, const ReferenceOptions& options) {
  if (w.problem.fp8()) return reference_layer_fp8(w, options);
  const Problem& p = w.problem;
  const DType d = p.dtype;
  const long long T = w.tokens, H = p.hidden, I = p.inter, k = p.topk;
  ReferenceOutput out;
  out.inter.assign(std::size_t(T * k * I), 0);
  out.y.assign(std::size_t(T * H), 0.0f);
  out.y16.assign(std::size_t(T * H), 0);

  // Widen the inputs once.
  auto widen = [&](const std::vector<std::uint16_t>& v) {
    std::vector<float> f(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) f[i] = half_to_f32(d, v[i]);
    return f;
  };
  const std::vector<float> x = widen(w.x), w1 = widen(w.w1), w2 = widen(w.w2);

  // Stage 1 per (token, slot) pair (zero where the slot has no expert), stored in the 16-bit type.
  const std::vector<float> h = stage1_f32(w, x, w1, options.weight_in_stage1, options.threads);
  for (std::size_t i = 0; i < h.size(); ++i) out.inter[i] = f32_to_half(d, h[i]);

  // Stage 2 and the top-k sum per token.
  parallel_for(T, options.threads, [&](long long t) {
    std::vector<float> row(static_cast<std::size_t>(I));
    for (long long s = 0; s < k; ++s) {
      const long long pair = t * k + s;
      const long long e = w.topk_ids[std::size_t(pair)];
      if (e < 0 || e >= w.problem.experts) continue;
      for (long long i = 0; i < I; ++i) row[std::size_t(i)] = half_to_f32(d, out.inter[std::size_t(pair * I + i)]);
      const float scale = options.weight_in_stage1 ? 1.0f : w.topk_weights[std::size_t(pair)];
      for (long long c = 0; c < H; ++c) {
        const float* wr = &w2[std::size_t((e * H + c) * I)];
        float acc = 0;
        for (long long i = 0; i < I; ++i) acc += row[std::size_t(i)] * wr[i];
        out.y[std::size_t(t * H + c)] += acc * scale;
      }
    }
    for (long long c = 0; c < H; ++c) out.y16[std::size_t(t * H + c)] = f32_to_half(d, out.y[std::size_t(t * H + c)]);
  });
  return out;
}

AlignReference reference_align(const Workload& w, int align_block) {
  const int E = w.problem.experts;
  AlignReference r;
  r.expert_pairs.resize(std::size_t(E));
  for (std::size_t i = 0; i < w.topk_ids.size(); ++i)
    if (w.topk_ids[i] >= 0 && w.topk_ids[i] < E) r.expert_pairs[std::size_t(w.topk_ids[i])].push_back(int(i));
  r.expert_offset.assign(std::size_t(E) + 1, 0);
  for (int e = 0; e < E; ++e) {
    const int n = int(r.expert_pairs[std::size_t(e)].size());
    r.expert_offset[std::size_t(e) + 1] = r.expert_offset[std::size_t(e)] + (n + align_block - 1) / align_block * align_block;
  }
  r.padded_rows = r.expert_offset[std::size_t(E)];
  for (int e = 0; e < E; ++e)
    for (int row = r.expert_offset[std::size_t(e)]; row < r.expert_offset[std::size_t(e) + 1]; row += align_block)
      r.block_experts.push_back(e);
  return r;
}

}  // namespace ft
