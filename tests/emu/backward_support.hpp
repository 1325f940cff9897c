#pragma once
// Shared pieces of the backward kernels' emulator tests (kgrouped_test.cpp,
// dgrad_test.cpp): a seeded layer with an expert that gets no tokens and -1
// slots, its fp32 backward reference, the sorted rows the forward's align
// would write, and uploads.
#include <algorithm>
#include <vector>

#include "device/device_buffer.hpp"
#include "measure/workload/backward_reference.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/reference.hpp"
#include "measure/workload/workload.hpp"
#include "tests/emu/emu_test_support.hpp"

namespace ft::emu::test {

// A layer's backward inputs (dY and the forward's saved tensors, rounded to
// the 16-bit type as a forward would store them) and its fp32 reference gradients.
struct Gradients {
  Workload w;
  AlignReference align;
  int align_block = 0;
  std::vector<std::uint16_t> dy, inter, d_gate_up, gate_up;  // in the problem's 16-bit type
  MoeGradients<float> ref;
};

// size: H = I (64; 128 for tiles of two 64-row warpgroup blocks).
inline Gradients gradients_for(DType d, int tokens, int align_block, int size = 64) {
  Problem p = emu_problem("kgrouped", d, size, size);
  p.routing = *Routing::parse("uniform");
  WorkloadOptions o;
  o.empty_experts = 1;
  o.seed = std::uint64_t(tokens) * 7 + 3;
  Gradients g{*make_workload(p, tokens, o), {}, align_block, {}, {}, {}, {}};
  for (std::size_t i = 1; i < g.w.topk_ids.size(); i += 5) g.w.topk_ids[i] = -1;  // masked slots
  g.align = reference_align(g.w, align_block);
  const MoeInputs<float> in = decoded_inputs(g.w);
  std::vector<float> dy(std::size_t(tokens) * std::size_t(p.hidden));
  for (std::size_t i = 0; i < dy.size(); ++i) {
    g.dy.push_back(f32_to_half(d, random_normal(std::uint64_t(tokens) + 101, i)));
    dy[i] = half_to_f32(d, g.dy.back());
  }
  g.ref = moe_backward(in, std::span<const float>(dy));
  for (float v : g.ref.inter) g.inter.push_back(f32_to_half(d, v));
  for (float v : g.ref.d_gate_up) g.d_gate_up.push_back(f32_to_half(d, v));
  for (float v : g.ref.gate_up) g.gate_up.push_back(f32_to_half(d, v));
  return g;
}

// d(topk_weights)'s bound on this layer against g.ref.dweights (routed_weight_tolerance).
inline Tolerance dweights_tolerance(const Gradients& g) {
  const DType d = g.w.problem.dtype;
  std::vector<float> dy(g.dy.size());
  for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = half_to_f32(d, g.dy[i]);
  return routed_weight_tolerance(d, g.ref.dweights, routed_weight_terms(decoded_inputs(g.w), dy, g.ref.inter));
}

template <class T>
inline Result<DeviceBuffer> upload(Device& dev, const std::vector<T>& v) {
  DeviceBuffer b = FT_TRY(DeviceBuffer::allocate(dev, std::max<std::size_t>(16, v.size() * sizeof(T))));
  if (!v.empty()) FT_CHECK(dev.copy_to_device(b.ptr(), v.data(), v.size() * sizeof(T)));
  return b;
}

// sorted_ids as the forward's align lays them out: each expert's pairs from
// its offset, the rest the pad (T*k), `capacity` entries (at least padded_rows).
inline std::vector<std::int32_t> sorted_rows(const Gradients& g, int capacity) {
  std::vector<std::int32_t> sorted(std::size_t(std::max({capacity, g.align.padded_rows, 1})), std::int32_t(g.w.pairs()));
  for (std::size_t e = 0; e < g.align.expert_pairs.size(); ++e)
    for (std::size_t j = 0; j < g.align.expert_pairs[e].size(); ++j)
      sorted[std::size_t(g.align.expert_offset[e]) + j] = g.align.expert_pairs[e][j];
  return sorted;
}

}  // namespace ft::emu::test
