#pragma once
// The counter-based random numbers of flytune's inputs: a pure function of
// (seed, index), the same on the device (random_fill.hpp), under emulation
// and on the host (tuner/workload: routing, router logits, CPU references),
// so host and device draw identical tensors.
namespace ft {

FT_HOST_DEVICE u64 splitmix64(u64 x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Four 16-bit uniforms of one hash, centred and scaled (Irwin-Hall): about
// N(0, 1) within +-3.46. The sums are exact in fp32 and the scaling by 1/65536
// is exact, so one rounding remains and every flavour gets the same bits.
FT_HOST_DEVICE float normalish_of_hash(u64 h) {
  const float u0 = float(h & 0xffffu), u1 = float((h >> 16) & 0xffffu), u2 = float((h >> 32) & 0xffffu),
              u3 = float(h >> 48);
  // Sum of four U(0, 1) has mean 2 and variance 1/3.
  return ((u0 + u1 + u2 + u3) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
}

FT_HOST_DEVICE float random_normalish(u64 seed, u64 index) { return normalish_of_hash(splitmix64(seed ^ splitmix64(index))); }

}  // namespace ft
