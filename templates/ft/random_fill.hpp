#pragma once
// Seeded random fill of tensors on the device, so multi-gigabyte weights are
// fresh for every check without crossing PCIe. Each element is a pure function
// of (seed, index): a splitmix64 hash gives four uniforms whose centred, scaled
// sum (Irwin-Hall) approximates N(0, 1) within +-3.46, times `scale` (the
// numbers are random.hpp's, which the host draws too), times a magnitude per
// `group` elements when group > 0 (random_input). fp8 layers' inputs: e4m3
// codes (elem 2) and fp32 scales (elem 3: random_scale, no normal draw).
#include "ft/random.hpp"

namespace ft {

FT_DEVICE float fill_value(const FillArgs& a, u64 i) {
  return a.elem == 3 ? random_scale(a.seed, i, a.scale) : random_input(a.seed, i, a.scale, a.group);
}

// Grid: ceil(count / 8 / kFillThreads) blocks of kFillThreads threads, 8 elements per thread.
FT_DEVICE void fill_random(const FillArgs& a) {
  const u64 first = ((u64)block_index_x() * kFillThreads + thread_index()) * 8;
  for (u64 i = first; i < first + 8 && i < a.count; ++i) {
    const float v = fill_value(a, i);
    if (a.elem == 3) {
      reinterpret_cast<float*>(a.dst)[i] = v;
    } else if (a.elem == 2) {
#if defined(FT_TARGET_E4M3)
      reinterpret_cast<u8*>(a.dst)[i] = from_f32<Elem::FT_TARGET_E4M3>(v);
#else
      reinterpret_cast<u8*>(a.dst)[i] = 0x7f;  // no fp8 on this target: NaN (OCP), never a silent value
#endif
    } else {
      a.dst[i] = a.elem == 0 ? f32_to_bf16(v) : f32_to_f16(v);
    }
  }
}

}  // namespace ft
