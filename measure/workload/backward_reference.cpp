#include "measure/workload/backward_reference.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "measure/workload/half.hpp"
#include "measure/workload/parallel_for.hpp"

namespace ft {
namespace {

template <class R>
R sigmoid(R g) {
  return R(1) / (R(1) + std::exp(-g));
}

// The expert of pair p, or -1 where the slot contributes nothing (-1 and bad ids alike).
template <class R>
long long expert_of(const MoeInputs<R>& in, long long p) {
  const long long e = in.ids[std::size_t(p)];
  return e >= 0 && e < in.shape.experts ? e : -1;
}

// Stage 1 of pair p routed to e: gate and up pre-activations [I] each.
template <class R>
void gate_up(const MoeInputs<R>& in, long long p, long long e, R* g, R* u) {
  const long long H = in.shape.hidden, I = in.shape.inter;
  const R* x = &in.x[std::size_t(p / in.shape.topk * H)];
  for (long long i = 0; i < I; ++i) {
    const R* gr = &in.w1[std::size_t((e * 2 * I + i) * H)];
    const R* ur = &in.w1[std::size_t((e * 2 * I + I + i) * H)];
    R gs = 0, us = 0;
    for (long long c = 0; c < H; ++c) {
      gs += x[c] * gr[c];
      us += x[c] * ur[c];
    }
    g[i] = gs;
    u[i] = us;
  }
}

// z = W2_e h ([H]).
template <class R>
void down(const MoeInputs<R>& in, long long e, const R* h, R* z) {
  const long long H = in.shape.hidden, I = in.shape.inter;
  for (long long c = 0; c < H; ++c) {
    const R* wr = &in.w2[std::size_t((e * H + c) * I)];
    R s = 0;
    for (long long i = 0; i < I; ++i) s += wr[i] * h[i];
    z[c] = s;
  }
}

// The per-pair half of the backward of pair p routed to e, given its forward
// values g, u, h (out.inter) and z: dweights, d_inter and d_gate_up of p. Each
// pair writes only its own rows, so pairs run in parallel.
template <class R>
void backward_pair(const MoeInputs<R>& in, std::span<const R> dy, long long p, long long e, const std::vector<R>& g,
                   const std::vector<R>& u, const std::vector<R>& z, MoeGradients<R>& out) {
  const long long H = in.shape.hidden, I = in.shape.inter, t = p / in.shape.topk;
  const R w = in.weights[std::size_t(p)];
  const R* dyt = &dy[std::size_t(t * H)];
  R dw = 0;
  for (long long c = 0; c < H; ++c) dw += dyt[c] * z[std::size_t(c)];
  out.dweights[std::size_t(p)] = dw;
  // dh = W2_e^T (w dY_t).
  R* dh = &out.d_inter[std::size_t(p * I)];
  for (long long c = 0; c < H; ++c) {
    const R dz = w * dyt[c];
    const R* wr = &in.w2[std::size_t((e * H + c) * I)];
    for (long long i = 0; i < I; ++i) dh[i] += wr[i] * dz;
  }
  // The SwiGLU backward.
  R* dgu = &out.d_gate_up[std::size_t(p * 2 * I)];
  for (long long i = 0; i < I; ++i) {
    const R gi = g[std::size_t(i)], s = sigmoid(gi);
    dgu[i] = dh[i] * u[std::size_t(i)] * s * (R(1) + gi * (R(1) - s));
    dgu[I + i] = dh[i] * gi * s;
  }
}

// The K-grouped sums, one weight row per call: row r of dW2 (r = e H + c:
// sum over e's pairs of (w_p dY_t[c]) h_p) or of dW1 (r = e 2I + n: sum of
// d_gate_up[p, n] x_t), over `pairs` (e's routed pairs, in order).
template <class R>
void dw2_row(const MoeInputs<R>& in, std::span<const R> dy, const std::vector<long long>& pairs, long long r,
             MoeGradients<R>& out) {
  const long long H = in.shape.hidden, I = in.shape.inter, c = r % H;
  R* row = &out.dw2[std::size_t(r * I)];
  for (long long p : pairs) {
    const R dz = in.weights[std::size_t(p)] * dy[std::size_t(p / in.shape.topk * H + c)];
    const R* h = &out.inter[std::size_t(p * I)];
    for (long long i = 0; i < I; ++i) row[i] += dz * h[i];
  }
}
template <class R>
void dw1_row(const MoeInputs<R>& in, const std::vector<long long>& pairs, long long r, MoeGradients<R>& out) {
  const long long H = in.shape.hidden, I = in.shape.inter, n = r % (2 * I);
  R* row = &out.dw1[std::size_t(r * H)];
  for (long long p : pairs) {
    const R d = out.d_gate_up[std::size_t(p * 2 * I + n)];
    const R* x = &in.x[std::size_t(p / in.shape.topk * H)];
    for (long long c = 0; c < H; ++c) row[c] += d * x[c];
  }
}

// dX_t = sum over t's routed slots of W1_e^T [dg; du].
template <class R>
void dx_row(const MoeInputs<R>& in, long long t, MoeGradients<R>& out) {
  const long long H = in.shape.hidden, I = in.shape.inter;
  R* dx = &out.dx[std::size_t(t * H)];
  for (long long p = t * in.shape.topk; p < (t + 1) * in.shape.topk; ++p) {
    const long long e = expert_of(in, p);
    if (e < 0) continue;
    const R* dgu = &out.d_gate_up[std::size_t(p * 2 * I)];
    for (long long n = 0; n < 2 * I; ++n) {
      const R* w1r = &in.w1[std::size_t((e * 2 * I + n) * H)];
      for (long long c = 0; c < H; ++c) dx[c] += w1r[c] * dgu[n];
    }
  }
}

}  // namespace

template <class R>
std::vector<R> moe_forward(const MoeInputs<R>& in) {
  const MoeShape& s = in.shape;
  std::vector<R> y(std::size_t(s.tokens * s.hidden), R(0));
  const auto I = static_cast<std::size_t>(s.inter), H = static_cast<std::size_t>(s.hidden);
  std::vector<R> g(I), u(I), h(I), z(H);
  for (long long p = 0; p < s.pairs(); ++p) {
    const long long e = expert_of(in, p);
    if (e < 0) continue;
    gate_up(in, p, e, g.data(), u.data());
    for (long long i = 0; i < s.inter; ++i) h[std::size_t(i)] = g[std::size_t(i)] * sigmoid(g[std::size_t(i)]) * u[std::size_t(i)];
    down(in, e, h.data(), z.data());
    const R w = in.weights[std::size_t(p)];
    for (long long c = 0; c < s.hidden; ++c) y[std::size_t(p / s.topk * s.hidden + c)] += w * z[std::size_t(c)];
  }
  return y;
}

template <class R>
MoeGradients<R> moe_backward(const MoeInputs<R>& in, std::span<const R> dy) {
  const MoeShape& s = in.shape;
  const long long H = s.hidden, I = s.inter, E = s.experts, P = s.pairs();
  MoeGradients<R> out;
  out.dx.assign(std::size_t(s.tokens * H), R(0));
  out.dw1.assign(std::size_t(E * 2 * I * H), R(0));
  out.dw2.assign(std::size_t(E * H * I), R(0));
  out.dweights.assign(std::size_t(P), R(0));
  out.gate_up.assign(std::size_t(P * 2 * I), R(0));
  out.inter.assign(std::size_t(P * I), R(0));
  out.d_inter.assign(std::size_t(P * I), R(0));
  out.d_gate_up.assign(std::size_t(P * 2 * I), R(0));
  // On every core (Mixtral's layer at the search's 333 verification tokens is
  // ~0.7 TFLOP): each step writes only its own rows, and every sum runs in the
  // order of the one-thread loops (pairs ascending), so the result does not
  // depend on the thread count.
  std::vector<std::vector<long long>> pairs_of(static_cast<std::size_t>(E));
  for (long long p = 0; p < P; ++p)
    if (const long long e = expert_of(in, p); e >= 0) pairs_of[std::size_t(e)].push_back(p);
  parallel_for(P, 0, [&](long long p) {
    const long long e = expert_of(in, p);
    if (e < 0) return;
    std::vector<R> g(static_cast<std::size_t>(I)), u(static_cast<std::size_t>(I)), z(static_cast<std::size_t>(H));
    gate_up(in, p, e, g.data(), u.data());
    for (long long i = 0; i < I; ++i) {
      out.gate_up[std::size_t(p * 2 * I + i)] = g[std::size_t(i)];
      out.gate_up[std::size_t(p * 2 * I + I + i)] = u[std::size_t(i)];
    }
    R* h = &out.inter[std::size_t(p * I)];
    for (long long i = 0; i < I; ++i) h[i] = g[std::size_t(i)] * sigmoid(g[std::size_t(i)]) * u[std::size_t(i)];
    down(in, e, h, z.data());
    backward_pair(in, dy, p, e, g, u, z, out);
  });
  parallel_for(E * H, 0, [&](long long r) { dw2_row(in, dy, pairs_of[std::size_t(r / H)], r, out); });
  parallel_for(E * 2 * I, 0, [&](long long r) { dw1_row(in, pairs_of[std::size_t(r / (2 * I))], r, out); });
  parallel_for(s.tokens, 0, [&](long long t) { dx_row(in, t, out); });
  return out;
}

MoeInputs<float> decoded_inputs(const Workload& w) {
  const Problem& p = w.problem;
  MoeInputs<float> in;
  in.shape = MoeShape{w.tokens, p.hidden, p.inter, p.experts, p.topk};
  auto decode = [&](const std::vector<std::uint16_t>& v) {
    std::vector<float> f(v.size());
    for (std::size_t i = 0; i < v.size(); ++i) f[i] = half_to_f32(p.dtype, v[i]);
    return f;
  };
  in.x = decode(w.x);
  in.w1 = decode(w.w1);
  in.w2 = decode(w.w2);
  in.ids = w.topk_ids;
  in.weights = w.topk_weights;
  return in;
}

std::vector<float> routed_weight_terms(const MoeInputs<float>& in, std::span<const float> dy, std::span<const float> inter) {
  const long long H = in.shape.hidden, I = in.shape.inter;
  std::vector<float> out(std::size_t(in.shape.pairs()), 0.0f);
  for (long long p = 0; p < in.shape.pairs(); ++p) {
    const long long e = expert_of(in, p);
    if (e < 0) continue;
    const float* dyt = &dy[std::size_t(p / in.shape.topk * H)];
    const float* h = &inter[std::size_t(p * I)];
    double sum = 0;
    for (long long i = 0; i < I; ++i) {
      double c = 0;  // C_i = (W2_e^T dY_t)_i
      for (long long r = 0; r < H; ++r) c += double(in.w2[std::size_t((e * H + r) * I + i)]) * dyt[r];
      sum += (c * h[i]) * (c * h[i]);
    }
    out[std::size_t(p)] = float(std::sqrt(sum));
  }
  return out;
}

Tolerance routed_weight_tolerance(DType d, std::span<const float> ref, std::span<const float> terms) {
  const double roundings = std::sqrt(3.0);  // h; g and u (the header)
  double ref2 = 0, terms2 = 0, ref_max = 0, terms_max = 0;
  for (float v : ref) ref2 += double(v) * v, ref_max = std::max(ref_max, double(std::fabs(v)));
  for (float v : terms) terms2 += double(v) * v, terms_max = std::max(terms_max, double(v));
  Tolerance t = tolerance_for(d);
  if (ref2 > 0) t.rel_l2 *= std::max(1.0, roundings * std::sqrt(terms2 / ref2));
  if (ref_max > 0) t.max_rel *= std::max(1.0, roundings * terms_max / ref_max);
  return t;
}

template std::vector<float> moe_forward(const MoeInputs<float>&);
template std::vector<double> moe_forward(const MoeInputs<double>&);
template MoeGradients<float> moe_backward(const MoeInputs<float>&, std::span<const float>);
template MoeGradients<double> moe_backward(const MoeInputs<double>&, std::span<const double>);

}  // namespace ft
