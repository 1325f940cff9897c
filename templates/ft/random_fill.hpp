#pragma once
// Seeded random fill of 16-bit tensors on the device, so multi-gigabyte
// weights are fresh for every check without crossing PCIe. Each element is a
// pure function of (seed, index): a splitmix64 hash gives four uniforms whose
// centred, scaled sum (Irwin-Hall) approximates N(0, 1) within +-3.46, times
// `scale` (the numbers are random.hpp's, which the host draws too).
#include "ft/random.hpp"

namespace ft {

// Grid: ceil(count / 8 / kFillThreads) blocks of kFillThreads threads, 8 elements per thread.
FT_DEVICE void fill_random(const FillArgs& a) {
  const u64 first = ((u64)block_index_x() * kFillThreads + thread_index()) * 8;
  for (u64 i = first; i < first + 8 && i < a.count; ++i) {
    const float v = random_normalish(a.seed, i) * a.scale;
    a.dst[i] = a.elem == 0 ? f32_to_bf16(v) : f32_to_f16(v);
  }
}

}  // namespace ft
