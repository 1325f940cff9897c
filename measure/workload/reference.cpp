#include "measure/workload/reference.hpp"

#include <algorithm>
#include <cmath>
#include <thread>

#include "measure/workload/half.hpp"

namespace ft {
namespace {

template <class Fn>
void parallel_for(long long count, unsigned threads, Fn fn) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = unsigned(std::clamp<long long>(count, 1, threads));
  if (threads == 1) {
    for (long long i = 0; i < count; ++i) fn(i);
    return;
  }
  std::vector<std::jthread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (long long i = t; i < count; i += threads) fn(i);
    });
}

}  // namespace

ReferenceOutput reference_layer(const Workload& w, const ReferenceOptions& options) {
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

  // Stage 1 per (token, slot) pair.
  parallel_for(T * k, options.threads, [&](long long pair) {
    const long long t = pair / k;
    const long long e = w.topk_ids[std::size_t(pair)];
    if (e < 0 || e >= w.problem.experts) {  // -1: no expert here; the slot contributes nothing
      for (long long i = 0; i < I; ++i) out.inter[std::size_t(pair * I + i)] = f32_to_half(d, 0.0f);
      return;
    }
    const float* xr = &x[std::size_t(t * H)];
    for (long long i = 0; i < I; ++i) {
      const float* g = &w1[std::size_t((e * 2 * I + i) * H)];
      const float* u = &w1[std::size_t((e * 2 * I + I + i) * H)];
      float gate = 0, up = 0;
      for (long long h = 0; h < H; ++h) {
        gate += xr[h] * g[h];
        up += xr[h] * u[h];
      }
      float v = gate / (1.0f + std::exp(-gate)) * up;
      if (options.weight_in_stage1) v *= w.topk_weights[std::size_t(pair)];
      out.inter[std::size_t(pair * I + i)] = f32_to_half(d, v);
    }
  });

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
