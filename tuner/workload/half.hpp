#pragma once
// 16-bit float conversions on the host, bit-for-bit the same as the kernels'
// (templates/ft/numeric.hpp): round to nearest even, NaN stays NaN, overflow to
// infinity, f16 subnormals kept.
#include <bit>
#include <cstdint>

#include "generator/problem.hpp"

namespace ft {

inline float bf16_bits_to_f32(std::uint16_t h) { return std::bit_cast<float>(std::uint32_t(h) << 16); }

inline std::uint16_t f32_to_bf16_bits(float f) {
  std::uint32_t b = std::bit_cast<std::uint32_t>(f);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu)) return std::uint16_t((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return std::uint16_t(b >> 16);
}

inline float f16_bits_to_f32(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  const std::uint32_t man = h & 0x3ffu;
  if (exp == 0x1fu) return std::bit_cast<float>(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    const float v = float(man) * 5.9604644775390625e-8f;  // man * 2^-24
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (man << 13));
}

inline std::uint16_t f32_to_f16_bits(float f) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (b >> 16) & 0x8000u;
  const std::uint32_t exp = (b >> 23) & 0xffu;
  std::uint32_t man = b & 0x7fffffu;
  if (exp == 0xffu) return std::uint16_t(sign | 0x7c00u | (man ? 0x200u : 0u));
  const int e = int(exp) - 127 + 15;
  if (e >= 0x1f) return std::uint16_t(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return std::uint16_t(sign);
    man |= 0x800000u;
    const std::uint32_t shift = std::uint32_t(14 - e);
    const std::uint32_t half = 1u << (shift - 1);
    const std::uint32_t rounded = (man + half - 1 + ((man >> shift) & 1u)) >> shift;
    return std::uint16_t(sign | rounded);
  }
  std::uint32_t out = sign | (std::uint32_t(e) << 10) | (man >> 13);
  const std::uint32_t rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (out & 1u))) ++out;
  return std::uint16_t(out);
}

inline float half_to_f32(DType d, std::uint16_t h) { return d == DType::bf16 ? bf16_bits_to_f32(h) : f16_bits_to_f32(h); }
inline std::uint16_t f32_to_half(DType d, float f) { return d == DType::bf16 ? f32_to_bf16_bits(f) : f32_to_f16_bits(f); }

}  // namespace ft
