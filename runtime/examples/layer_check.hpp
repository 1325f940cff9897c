#pragma once
// Runs one MoE layer through the runtime's C API on seeded random inputs and
// compares Y with the support unit's reference kernels. Shared by the example
// (run_layer.cpp) and the GPU test (tests/gpu/runtime_gpu_test.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "flytune_runtime.h"
#include "generator/problem.hpp"
#include "tuner/workload/compare.hpp"
#include "tuner/workload/half.hpp"

namespace ft::example {

struct LayerCheck {
  int tokens = 0;
  int bucket = 0;
  bool passed = false;
  std::string summary;  // the comparison, or what failed
};

// Device memory released on scope exit.
class DeviceAllocations {
 public:
  explicit DeviceAllocations(ft_runtime* rt) : rt_(rt) {}
  ~DeviceAllocations() {
    for (void* p : ptrs_) ft_runtime_free(rt_, p);
  }
  DeviceAllocations(const DeviceAllocations&) = delete;
  DeviceAllocations& operator=(const DeviceAllocations&) = delete;
  void* get(std::size_t bytes) {
    void* p = nullptr;
    if (ft_runtime_alloc(rt_, bytes ? bytes : 4, &p) != FT_OK) return nullptr;
    ptrs_.push_back(p);
    return p;
  }

 private:
  ft_runtime* rt_;
  std::vector<void*> ptrs_;
};

// Top-k routing: distinct experts per token, weights summing to 1.
inline void random_routing(int tokens, int experts, int topk, std::uint64_t seed, std::vector<std::int32_t>& ids,
                           std::vector<float>& weights) {
  std::mt19937_64 rng(seed);
  ids.resize(std::size_t(tokens) * topk);
  weights.resize(ids.size());
  std::vector<int> order(static_cast<std::size_t>(experts));
  for (int t = 0; t < tokens; ++t) {
    for (int e = 0; e < experts; ++e) order[std::size_t(e)] = e;
    std::shuffle(order.begin(), order.end(), rng);
    float sum = 0;
    for (int s = 0; s < topk; ++s) {
      const float w = 0.1f + float(rng() % 1000) / 1000.0f;
      ids[std::size_t(t) * topk + s] = order[std::size_t(s)];
      weights[std::size_t(t) * topk + s] = w;
      sum += w;
    }
    for (int s = 0; s < topk; ++s) weights[std::size_t(t) * topk + s] /= sum;
  }
}

// `capture`, when given, enqueues the launch its own way (e.g. into a graph)
// and returns an FT status; otherwise ft_plan_launch on the default stream.
template <class Launch>
LayerCheck check_layer(ft_runtime* rt, const std::string& problem_key, int tokens, std::uint64_t seed, Launch&& launch) {
  LayerCheck out;
  out.tokens = tokens;
  auto failed = [&](const std::string& what) {
    out.summary = what + ": " + ft_runtime_last_error(rt);
    return out;
  };
  ft_plan* plan = nullptr;
  if (ft_runtime_select(rt, problem_key.c_str(), tokens, &plan) != FT_OK) return failed("select");
  struct PlanGuard {
    ft_plan* p;
    ~PlanGuard() { ft_plan_free(p); }
  } guard{plan};
  out.bucket = ft_plan_bucket(plan);
  ft_problem_shape shape{};
  ft_plan_shape(plan, &shape);
  ft_workspace_sizes ws{};
  ft_plan_workspace(plan, &ws);
  const std::size_t T = std::size_t(tokens), E = std::size_t(shape.experts), H = std::size_t(shape.hidden),
                    I = std::size_t(shape.inter), k = std::size_t(shape.topk), es = 2;

  DeviceAllocations mem(rt);
  ft_layer_buffers b{};
  void* x = mem.get(T * H * es);
  void* w1 = mem.get(E * 2 * I * H * es);
  void* w2 = mem.get(E * H * I * es);
  auto* ids = static_cast<std::int32_t*>(mem.get(T * k * 4));
  auto* weights = static_cast<float*>(mem.get(T * k * 4));
  void* y = mem.get(T * H * es);
  void* y_ref = mem.get(T * H * es);
  b.inter = mem.get(ws.inter);
  b.y_acc = static_cast<float*>(mem.get(ws.y_acc));
  b.sorted_ids = static_cast<std::int32_t*>(mem.get(ws.sorted_ids));
  b.block_experts = static_cast<std::int32_t*>(mem.get(ws.block_experts));
  b.padded_rows = static_cast<std::int32_t*>(mem.get(ws.padded_rows));
  if (!x || !w1 || !w2 || !ids || !weights || !y || !y_ref || !b.inter || !b.y_acc || !b.sorted_ids || !b.block_experts ||
      !b.padded_rows)
    return failed("alloc");
  b.x = x;
  b.w1 = w1;
  b.w2 = w2;
  b.topk_ids = ids;
  b.topk_weights = weights;
  b.y = y;
  // Weights ~ N(0, 1/K) keep every stage's outputs O(1).
  if (ft_runtime_fill_random(rt, x, T * H, seed * 3 + 1, 1.0f) != FT_OK ||
      ft_runtime_fill_random(rt, w1, E * 2 * I * H, seed * 3 + 2, float(1.0 / std::sqrt(double(H)))) != FT_OK ||
      ft_runtime_fill_random(rt, w2, E * H * I, seed * 3 + 3, float(1.0 / std::sqrt(double(I)))) != FT_OK)
    return failed("fill");
  std::vector<std::int32_t> host_ids;
  std::vector<float> host_weights;
  random_routing(tokens, shape.experts, shape.topk, seed, host_ids, host_weights);
  if (ft_runtime_upload(rt, ids, host_ids.data(), host_ids.size() * 4) != FT_OK ||
      ft_runtime_upload(rt, weights, host_weights.data(), host_weights.size() * 4) != FT_OK)
    return failed("upload");
  // Each stage's weights in the layout its kernel reads (a server does this once, at load time).
  const struct {
    int stage;
    const void* plain;
    std::size_t rows, cols;
    const void** shuffled;
    const void** tiled;
  } stage_weights[] = {{1, w1, E * 2 * I, H, &b.w1_shuffled, &b.w1_tiled}, {2, w2, E * H, I, &b.w2_shuffled, &b.w2_tiled}};
  for (const auto& w : stage_weights) {
    const int layout = ft_plan_needs_shuffled(plan, w.stage) ? FT_WEIGHT_LAYOUT_SHUFFLED
                       : ft_plan_needs_tiled(plan, w.stage)  ? FT_WEIGHT_LAYOUT_TILED
                                                              : FT_WEIGHT_LAYOUT_PLAIN;
    if (layout == FT_WEIGHT_LAYOUT_PLAIN) continue;
    void* dst = mem.get(w.rows * w.cols * es);
    if (!dst || ft_runtime_arrange_weights(rt, w.plain, dst, int(w.rows), int(w.cols), layout, nullptr) != FT_OK)
      return failed("arrange w" + std::to_string(w.stage));
    *(layout == FT_WEIGHT_LAYOUT_SHUFFLED ? w.shuffled : w.tiled) = dst;
  }
  // The reference first: it overwrites `inter`, which the layer then rewrites.
  if (ft_plan_reference(plan, &b, y_ref, nullptr) != FT_OK) return failed("reference");
  if (ft_runtime_synchronize(rt, nullptr) != FT_OK) return failed("reference sync");
  // Poison Y (all-ones bits: NaN) so an element the layer never writes fails.
  std::vector<std::uint16_t> poison(T * H, 0xffff);
  if (ft_runtime_upload(rt, y, poison.data(), poison.size() * 2) != FT_OK) return failed("poison");
  if (launch(plan, b) != FT_OK) return failed("launch");
  if (ft_runtime_synchronize(rt, nullptr) != FT_OK) return failed("layer sync");
  std::vector<std::uint16_t> got(T * H), ref_bits(T * H);
  if (ft_runtime_download(rt, got.data(), y, got.size() * 2) != FT_OK ||
      ft_runtime_download(rt, ref_bits.data(), y_ref, ref_bits.size() * 2) != FT_OK)
    return failed("download");
  const DType dtype = std::string(shape.dtype) == "f16" ? DType::f16 : DType::bf16;
  std::vector<float> ref(ref_bits.size());
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = half_to_f32(dtype, ref_bits[i]);
  const Comparison c = compare_output(got, ref, dtype);
  out.passed = c.passed;
  out.summary = c.summary(H);
  return out;
}

inline LayerCheck check_layer(ft_runtime* rt, const std::string& problem_key, int tokens, std::uint64_t seed) {
  return check_layer(rt, problem_key, tokens, seed,
                     [](ft_plan* plan, const ft_layer_buffers& b) { return ft_plan_launch(plan, &b, nullptr); });
}

}  // namespace ft::example
