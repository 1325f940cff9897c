#pragma once
// Seeded random fill of 16-bit tensors on the device, so multi-gigabyte
// weights are fresh for every check without crossing PCIe. Each element is a
// pure function of (seed, index): a splitmix64 hash gives four uniforms whose
// centred, scaled sum (Irwin-Hall) approximates N(0, 1) within +-3.46, times
// `scale`.
namespace ft {

FT_HOST_DEVICE u64 splitmix64(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

FT_HOST_DEVICE float random_normalish(u64 seed, u64 index) {
  const u64 h = splitmix64(seed ^ splitmix64(index));
  const float u0 = float(h & 0xffffu), u1 = float((h >> 16) & 0xffffu), u2 = float((h >> 32) & 0xffffu),
              u3 = float(h >> 48);
  // Sum of four U(0, 1) has mean 2 and variance 1/3.
  return ((u0 + u1 + u2 + u3) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

// Grid: ceil(count / 8 / kFillThreads) blocks of kFillThreads threads, 8 elements per thread.
FT_DEVICE void fill_random(const FillArgs& a) {
  const u64 first = ((u64)block_index_x() * kFillThreads + thread_index()) * 8;
  for (u64 i = first; i < first + 8 && i < a.count; ++i) {
    const float v = random_normalish(a.seed, i) * a.scale;
    a.dst[i] = a.elem == 0 ? f32_to_bf16(v) : f32_to_f16(v);
  }
}

}  // namespace ft
