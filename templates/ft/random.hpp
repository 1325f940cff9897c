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

// A magnitude 2^(j/2), j in -4..4 (0.25 .. 4), for group `group` of stream `seed`.
// fp8 inputs give every scale group (a token's 128 values, a channel, a weight
// block, an expert) its own magnitude, so a kernel that applies another group's
// scale is visibly wrong. The constants are exact literals: every flavour gets the same bits.
FT_HOST_DEVICE float random_magnitude(u64 seed, u64 group) {
  const u64 h = splitmix64(seed ^ splitmix64(group ^ 0x6d61676e69747564ull));
  switch (int(h % 9u)) {
    case 0: return 0.25f;
    case 1: return 0.35355339f;
    case 2: return 0.5f;
    case 3: return 0.70710678f;
    case 4: return 1.0f;
    case 5: return 1.41421356f;
    case 6: return 2.0f;
    case 7: return 2.82842712f;
    default: return 4.0f;
  }
}

// The fp8 weight codes of the inputs: random_normalish x this, encoded (|value| <= 222,
// inside both e4m3 formats' range), so the codes spread over most binades.
inline constexpr float kFp8CodeSpread = 64.0f;

// Element `index` of a random input stream: random_normalish x scale, times the
// magnitude of its group of `group` consecutive elements when group > 0 (the
// device fill and the host workloads: the same bits).
FT_HOST_DEVICE float random_input(u64 seed, u64 index, float scale, int group) {
  const float v = random_normalish(seed, index) * scale;
  return group > 0 ? v * random_magnitude(seed, index / u64(group)) : v;
}
// Scale `index` of a random fp8 scale tensor: base x its own magnitude.
FT_HOST_DEVICE float random_scale(u64 seed, u64 index, float base) { return base * random_magnitude(seed, index); }

}  // namespace ft
