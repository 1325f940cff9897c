#include "runtime/check/backward_check.hpp"

#include <algorithm>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "runtime/src/runtime_impl.hpp"
#include "measure/workload/backward_reference.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/half.hpp"

namespace ft::check {
namespace {

// A device buffer's 16-bit values, decoded.
bool download_values(ft_runtime* rt, const void* p, std::size_t count, DType d, std::vector<float>& out) {
  std::vector<std::uint16_t> bits(count);
  if (ft_runtime_download(rt, bits.data(), p, count * 2) != FT_OK) return false;
  out.resize(count);
  for (std::size_t i = 0; i < count; ++i) out[i] = half_to_f32(d, bits[i]);
  return true;
}

// Seeded 16-bit values on the device (the runtime's fill kernel), decoded on the host.
bool random_values(ft_runtime* rt, void* p, std::size_t count, std::uint64_t seed, DType d, std::vector<float>& out) {
  return ft_runtime_fill_random_as(rt, p, count, seed, 1.0f, d == DType::f16 ? FT_FILL_F16 : FT_FILL_BF16, 0) == FT_OK &&
         download_values(rt, p, count, d, out);
}

// The named comparisons of one row: each must pass; the row reports the worst.
struct Verdict {
  std::vector<std::pair<std::string, Comparison>> checks;
  void add(std::string name, const Comparison& c) { checks.emplace_back(std::move(name), c); }
  void into(CheckRow& row) const {
    const auto* worst = &checks.front();
    for (const auto& c : checks)
      if ((!c.second.passed && worst->second.passed) ||
          (c.second.passed == worst->second.passed && c.second.rel_l2 > worst->second.rel_l2))
        worst = &c;
    row.passed = std::ranges::all_of(checks, [](const auto& c) { return c.second.passed; });
    row.rel_l2 = worst->second.rel_l2;
    row.summary = fmt::format("{}: {}", worst->first, worst->second.summary());
  }
};

// d(topk_weights)[p] = dY_t . (W2_e h_p) with h_p as the forward stored it
// (16-bit `saved_inter`, decoded in `h`): the gradient of the layer the forward
// ran. Held to routed_weight_tolerance (backward_reference.hpp): the kernel's
// h, recomputed from the rounded g and u, differs from it by roundings whose
// effect scales with the terms of the sum, not with the sum.
std::vector<float> routed_weight_gradient(const MoeInputs<float>& in, const std::vector<float>& dy, const std::vector<float>& h) {
  const long long H = in.shape.hidden, I = in.shape.inter, k = in.shape.topk;
  std::vector<float> out(std::size_t(in.shape.pairs()), 0.0f);
  for (long long p = 0; p < in.shape.pairs(); ++p) {
    const long long e = in.ids[std::size_t(p)];
    if (e < 0 || e >= in.shape.experts) continue;
    float sum = 0;
    for (long long c = 0; c < H; ++c) {
      const float* w = &in.w2[std::size_t((e * H + c) * I)];
      float z = 0;
      for (long long i = 0; i < I; ++i) z += w[i] * h[std::size_t(p * I + i)];
      sum += dy[std::size_t(p / k * H + c)] * z;
    }
    out[std::size_t(p)] = sum;
  }
  return out;
}

}  // namespace

std::string backward_unchecked(const ft_problem_shape& s, int tokens) {
  // The reference's passes: the forward's two GEMMs, then three of the backward's.
  const double pass = double(tokens) * s.topk * 3.0 * s.inter * s.hidden;
  if (pass * 2.0 <= kBackwardReferenceWork) return "";
  return fmt::format("the backward at T={} is not checked: its CPU reference is above {:.0e} multiply-adds (check smaller T "
                     "with --tokens)", tokens, kBackwardReferenceWork);
}

CheckRow check_backward(PlannedRow& planned, ProblemWeights& weights, const RowStart& start) {
  CheckRow& row = planned.row;
  ft_runtime* rt = planned.rt;
  const ft_plan* plan = start.plan;
  const int tokens = row.tokens;
  const std::uint64_t seed = start.seed;
  const ft_problem_shape& shape = start.shape;
  auto failed = [&](const std::string& what) { return planned.failed(what); };
  const DType d = rt::plan_of(plan)->problem->problem.dtype;
  const std::size_t T = std::size_t(tokens), H = std::size_t(shape.hidden), I = std::size_t(shape.inter),
                    E = std::size_t(shape.experts), k = std::size_t(shape.topk);
  const Routed& routed = start.routed;
  MoeInputs<float> in;
  in.shape = {(long long)T, (long long)H, (long long)I, (long long)E, (long long)k};
  in.ids = routed.ids;
  in.weights = routed.weights;
  Allocations mem(rt);
  ft_layer_grads g{};
  void* x = mem.get(T * H * 2);
  void* dy = mem.get(T * H * 2);
  void* ids = mem.get(T * k * 4);
  void* tw = mem.get(T * k * 4);
  void* saved_gate_up = mem.get(T * k * 2 * I * 2);
  void* saved_inter = mem.get(T * k * I * 2);
  float* dx = static_cast<float*>(mem.get(T * H * 4));
  float* dw1 = static_cast<float*>(mem.get(E * 2 * I * H * 4));
  float* dw2 = static_cast<float*>(mem.get(E * H * I * 4));
  float* dtw = static_cast<float*>(mem.get(T * k * 4));
  const std::size_t workspace_bytes = ft_plan_backward_workspace_bytes(plan, tokens);
  g.workspace = mem.get(workspace_bytes);
  g.workspace_bytes = workspace_bytes;
  if (!x || !dy || !ids || !tw || !saved_gate_up || !saved_inter || !dx || !dw1 || !dw2 || !dtw || !g.workspace || !workspace_bytes)
    return failed("alloc");
  std::vector<float> dy_ref;
  if (!random_values(rt, x, T * H, seed * 7 + 1, d, in.x) || !random_values(rt, dy, T * H, seed * 7 + 2, d, dy_ref) ||
      !download_values(rt, weights.plain(1), E * 2 * I * H, d, in.w1) || !download_values(rt, weights.plain(2), E * H * I, d, in.w2))
    return failed("inputs");
  if (ft_runtime_upload(rt, ids, routed.ids.data(), T * k * 4) != FT_OK ||
      ft_runtime_upload(rt, tw, routed.weights.data(), T * k * 4) != FT_OK)
    return failed("upload");
  g.x = x, g.topk_ids = static_cast<const std::int32_t*>(ids), g.topk_weights = static_cast<const float*>(tw);
  g.w1 = weights.plain(1), g.w2 = weights.plain(2), g.dy = dy;
  g.saved_gate_up = saved_gate_up, g.saved_inter = saved_inter;
  g.dx = dx, g.dw1 = dw1, g.dw2 = dw2, g.d_topk_weights = dtw;
  const MoeGradients<float> ref = moe_backward(in, std::span<const float>(dy_ref));
  // The saved tensors as a training step without them obtains them, poisoned first.
  if (!poison(rt, saved_gate_up, T * k * 2 * I * 2) || !poison(rt, saved_inter, T * k * I * 2)) return failed("poison");
  if (ft_plan_backward_saved(plan, &g, nullptr) != FT_OK) return failed("saved");
  // Every output and the workspace poisoned: the backward must write (or clear) what it reads.
  for (auto [p, bytes] : {std::pair<void*, std::size_t>{dx, T * H * 4}, {dw1, E * 2 * I * H * 4}, {dw2, E * H * I * 4},
                          {dtw, T * k * 4}, {g.workspace, workspace_bytes}})
    if (!poison(rt, p, bytes)) return failed("poison");
  if (ft_plan_backward_launch(plan, &g, nullptr) != FT_OK) return failed("launch");
  if (ft_runtime_synchronize(rt, nullptr) != FT_OK) return failed("sync");
  Verdict v;
  std::vector<std::uint16_t> bits;
  for (auto [name, p, want] : {std::tuple{"saved_gate_up", saved_gate_up, &ref.gate_up}, {"saved_inter", saved_inter, &ref.inter}}) {
    bits.resize(want->size());
    if (ft_runtime_download(rt, bits.data(), p, bits.size() * 2) != FT_OK) return failed("download");
    v.add(name, compare_output(bits, *want, d));
  }
  std::vector<float> h(bits.size());  // bits: saved_inter
  for (std::size_t i = 0; i < h.size(); ++i) h[i] = half_to_f32(d, bits[i]);
  const std::vector<float> dweights = routed_weight_gradient(in, dy_ref, h);
  const Tolerance plain = tolerance_for(d);
  const Tolerance dweights_tol = routed_weight_tolerance(d, dweights, routed_weight_terms(in, dy_ref, h));
  std::vector<float> got;
  for (auto [name, p, want, tol] : {std::tuple{"dx", dx, &ref.dx, &plain}, {"dw1", dw1, &ref.dw1, &plain},
                                    {"dw2", dw2, &ref.dw2, &plain}, {"d_topk_weights", dtw, &dweights, &dweights_tol}}) {
    got.resize(want->size());
    if (ft_runtime_download(rt, got.data(), p, got.size() * 4) != FT_OK) return failed("download");
    v.add(name, compare_values(got, *want, *tol));
  }
  // The weight gradients in the weights' type (ft_layer_grads' dw1_16, dw2_16) from a second launch,
  // dw1 and dw2 null, the 16-bit outputs poisoned: every element written, within the 16-bit bounds.
  // An export whose kernels predate them refuses the call (FT_ERR_NOT_FOUND): only fp32 is checked.
  void* dw1_16 = mem.get(E * 2 * I * H * 2);
  void* dw2_16 = mem.get(E * H * I * 2);
  if (!dw1_16 || !dw2_16) return failed("alloc");
  ft_layer_grads g16 = g;
  g16.dw1 = nullptr, g16.dw2 = nullptr, g16.dw1_16 = dw1_16, g16.dw2_16 = dw2_16;
  for (auto [p, bytes] : {std::pair<void*, std::size_t>{dx, T * H * 4}, {dw1_16, E * 2 * I * H * 2}, {dw2_16, E * H * I * 2},
                          {dtw, T * k * 4}, {g.workspace, workspace_bytes}})
    if (!poison(rt, p, bytes)) return failed("poison");
  const int launched = ft_plan_backward_launch(plan, &g16, nullptr);
  if (launched != FT_OK && launched != FT_ERR_NOT_FOUND) return failed("launch (16-bit dW)");
  if (launched == FT_OK) {
    if (ft_runtime_synchronize(rt, nullptr) != FT_OK) return failed("sync");
    for (auto [name, p, want] : {std::tuple{"dw1_16", dw1_16, &ref.dw1}, {"dw2_16", dw2_16, &ref.dw2}}) {
      bits.resize(want->size());
      if (ft_runtime_download(rt, bits.data(), p, bits.size() * 2) != FT_OK) return failed("download");
      v.add(name, compare_output(bits, *want, d));
    }
  }
  v.into(row);
  return row;
}

}  // namespace ft::check
