#pragma once
// Element types and conversions shared by every flavour. 16-bit floats travel
// as raw bits (u16) so no vendor half/bfloat header is needed; arithmetic is fp32.
namespace ft {

enum class Elem { bf16, f16 };

FT_HOST_DEVICE float bits_to_f32(u32 b) { return __builtin_bit_cast(float, b); }
FT_HOST_DEVICE u32 f32_to_bits(float f) { return __builtin_bit_cast(u32, f); }

FT_HOST_DEVICE float bf16_to_f32(u16 h) { return bits_to_f32(u32(h) << 16); }

// Round to nearest even; NaN stays NaN (quiet), infinities and overflow as IEEE.
FT_HOST_DEVICE u16 f32_to_bf16(float f) {
  u32 b = f32_to_bits(f);
  if ((b & 0x7f800000u) == 0x7f800000u && (b & 0x007fffffu)) return u16((b >> 16) | 0x40u);
  b += 0x7fffu + ((b >> 16) & 1u);
  return u16(b >> 16);
}

FT_HOST_DEVICE float f16_to_f32(u16 h) {
  u32 sign = u32(h & 0x8000u) << 16;
  u32 exp = (h >> 10) & 0x1fu;
  u32 man = h & 0x3ffu;
  if (exp == 0x1fu) return bits_to_f32(sign | 0x7f800000u | (man << 13));  // inf / nan
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    // Subnormal: value = man * 2^-24.
    float v = float(man) * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

FT_HOST_DEVICE u16 f32_to_f16(float f) {
  u32 b = f32_to_bits(f);
  u32 sign = (b >> 16) & 0x8000u;
  u32 exp = (b >> 23) & 0xffu;
  u32 man = b & 0x7fffffu;
  if (exp == 0xffu) return u16(sign | 0x7c00u | (man ? 0x200u : 0u));
  int e = int(exp) - 127 + 15;
  if (e >= 0x1f) return u16(sign | 0x7c00u);  // overflow to infinity
  if (e <= 0) {
    if (e < -10) return u16(sign);
    // Subnormal: shift the implicit-one mantissa, round to nearest even.
    man |= 0x800000u;
    u32 shift = u32(14 - e);
    u32 half = 1u << (shift - 1);
    u32 rounded = (man + half - 1 + ((man >> shift) & 1u)) >> shift;
    return u16(sign | rounded);
  }
  u32 out = sign | (u32(e) << 10) | (man >> 13);
  u32 rest = man & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (out & 1u))) ++out;  // carries into the exponent correctly
  return u16(out);
}

template <Elem E>
FT_HOST_DEVICE float to_f32(u16 v) {
  if constexpr (E == Elem::bf16) return bf16_to_f32(v);
  else return f16_to_f32(v);
}

template <Elem E>
FT_HOST_DEVICE u16 from_f32(float v) {
  if constexpr (E == Elem::bf16) return f32_to_bf16(v);
  else return f32_to_f16(v);
}

template <class T, int N>
FT_HOST_DEVICE void copy_bytes(T* dst, const T* src) {
  FT_MEMCPY(dst, src, sizeof(T) * N);
}

FT_HOST_DEVICE float silu(float g, float e_neg_g) { return g / (1.0f + e_neg_g); }

}  // namespace ft
