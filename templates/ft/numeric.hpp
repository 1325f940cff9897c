#pragma once
// Element conversions shared by every flavour (the element types are elem.hpp's,
// included before this header, as are int_types.hpp's names). 16-bit floats
// travel as raw bits (u16) and fp8 as raw bytes (u8), so no vendor half, bfloat
// or fp8 header is needed; arithmetic is fp32.
namespace ft {

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

// --- fp8 (e4m3: 1 sign, 4 exponent, 3 mantissa bits) --------------------------
//
// Decoding is exact (every e4m3 value is an f32). A NaN code decodes to the
// quiet NaN 0x7fc00000 whatever its sign. OCP 0x80 is -0; fnuz has no -0 (0x80
// is its NaN).
//
// Encoding rounds to nearest, ties to even, and saturates: every non-NaN value
// whose magnitude exceeds the format's max (448 OCP, 240 fnuz) -- infinities
// included -- becomes +-max; NaN becomes the format's NaN (OCP 0x7f, fnuz 0x80);
// values that round to zero keep their sign on OCP (0x80) and become 0x00 on
// fnuz. f32 subnormals are far below half the smallest fp8 subnormal (2^-10
// OCP, 2^-11 fnuz), so they round to zero with or without flushing.
//
// What the hardware conversions do (the kernels that quantise will use them):
// - sm_90a `cvt.rn.satfinite.e4m3x2.f32` (PTX ISA, cvt, .satfinite: "if the input
//   value is NaN, then the result is NaN in the specified destination format. If
//   the absolute value of input (ignoring sign) is greater than MAX_NORM ... the
//   result is sign-preserved MAX_NORM"): exactly the rule above; NVIDIA's host
//   model of it (cuda_fp8.hpp, __nv_cvt_float_to_fp8 with __NV_SATFINITE)
//   rounds to nearest even, keeps the sign of zero and gives 0x7f for every NaN.
//   tests/gpu/atom_crosscheck_test.cpp compares this encoder with the instruction
//   on the H200.
// - gfx942 / gfx950 `v_cvt_pk_fp8_f32` (__builtin_amdgcn_cvt_pk_fp8_f32): round to
//   nearest even in the target's flavour (fnuz on gfx942, OCP on gfx950); without
//   its clamp bit a finite overflow becomes NaN, with it finite values saturate
//   but an infinity still becomes NaN (a model of the instruction built from GPU
//   captures, goc's narrow_fp8; ROCm's libraries -- hip_fp8.h, hipBLASLt -- clamp
//   finite inputs with v_med3_f32 before it and let infinities become NaN). So
//   an AMD kernel matches this encoder by clamping every non-NaN input,
//   infinities too, to [-max, max] (v_med3_f32) before the conversion; the NaN
//   code the gfx950 instruction writes (0x7f or 0xff) is not checked anywhere yet.
template <int Bias, bool Fnuz>
struct E4m3Format {
  static constexpr int bias = Bias;
  static constexpr bool fnuz = Fnuz;
  static constexpr u8 nan = Fnuz ? 0x80 : 0x7f;    // the NaN the encoder writes
  static constexpr u8 max_code = Fnuz ? 0x7f : 0x7e;  // 240 : 448
};
using OcpE4m3 = E4m3Format<7, false>;
using FnuzE4m3 = E4m3Format<8, true>;

template <class F>
FT_HOST_DEVICE bool e4m3_is_nan(u8 v) {
  if constexpr (F::fnuz) return v == 0x80;
  else return (v & 0x7f) == 0x7f;
}

template <class F>
FT_HOST_DEVICE float e4m3_decode(u8 v) {
  if (e4m3_is_nan<F>(v)) return bits_to_f32(0x7fc00000u);
  const u32 e = (v >> 3) & 0xfu, m = v & 7u;
  float mag;
  if (e == 0) mag = float(m) * bits_to_f32(u32(127 - F::bias - 2) << 23);  // m * 2^(1 - bias - 3)
  else mag = bits_to_f32(((e + 127u - u32(F::bias)) << 23) | (m << 20));
  return (v & 0x80) ? -mag : mag;
}

template <class F>
FT_HOST_DEVICE u8 e4m3_encode(float f) {
  const u32 b = f32_to_bits(f);
  const u32 mag = b & 0x7fffffffu;
  const u8 sign = u8((b >> 24) & 0x80u);
  if (mag > 0x7f800000u) return F::nan;
  const u32 max_bits = f32_to_bits(e4m3_decode<F>(F::max_code));
  if (mag > max_bits) return u8(sign | F::max_code);  // saturate, infinities included
  const int exp = int(mag >> 23);                     // biased f32 exponent
  u32 code;
  if (exp - 127 + F::bias >= 1) {
    // Normal: keep 3 mantissa bits, round the other 20 to nearest even (a carry
    // into the exponent is right), then rebias the exponent field.
    const u32 kept = mag >> 20, rest = mag & 0xfffffu;
    const u32 up = rest > 0x80000u || (rest == 0x80000u && (kept & 1u));
    code = kept + up - (u32(127 - F::bias) << 3);
  } else {
    // Subnormal (or zero): the code is |f| / 2^(1 - bias - 3), rounded to nearest
    // even; 8 (the smallest normal) when it rounds up across.
    const u32 shift = u32(148 - F::bias - exp);  // 24-bit significand down to the code
    if (exp == 0 || shift > 24) code = 0;        // at most half the smallest subnormal
    else {
      const u32 sig = (mag & 0x7fffffu) | 0x800000u;
      const u32 kept = sig >> shift, rest = sig & ((1u << shift) - 1u), half = 1u << (shift - 1);
      code = kept + (rest > half || (rest == half && (kept & 1u)));
    }
  }
  if (F::fnuz && code == 0) return 0;  // fnuz has no -0
  return u8(sign | code);
}

FT_HOST_DEVICE float e4m3_to_f32(u8 v) { return e4m3_decode<OcpE4m3>(v); }
FT_HOST_DEVICE float e4m3fnuz_to_f32(u8 v) { return e4m3_decode<FnuzE4m3>(v); }
// In CUDA device code the instruction of the same rule (port_cuda.hpp); the
// host, the emulator and the AMD flavours run the encoder above.
FT_HOST_DEVICE u8 f32_to_e4m3(float f) {
#if defined(FT_HW_E4M3_ENCODE) && defined(__CUDA_ARCH__)
  return hw_f32_to_e4m3(f);
#else
  return e4m3_encode<OcpE4m3>(f);
#endif
}
FT_HOST_DEVICE u8 f32_to_e4m3fnuz(float f) { return e4m3_encode<FnuzE4m3>(f); }

// The e4m3 flavour of the target being compiled, from its row's fp8 column
// (Target::template_defines: FT_FP8_FNUZ on gfx942, FT_FP8_OCP on gfx950 and
// sm_90a; neither on gfx90a or on the host, where FT_TARGET_E4M3 is undefined).
#if defined(FT_FP8_FNUZ) && defined(FT_FP8_OCP)
#error "numeric.hpp: FT_FP8_FNUZ and FT_FP8_OCP both defined"
#elif defined(FT_FP8_FNUZ)
#define FT_TARGET_E4M3 e4m3fnuz
#elif defined(FT_FP8_OCP)
#define FT_TARGET_E4M3 e4m3
#endif

// --- one spelling for every element type --------------------------------------

// The raw storage of one element: u16 for the 16-bit floats, u8 for fp8.
template <Elem E>
struct ElemStorage {
  using type = u16;
};
template <>
struct ElemStorage<Elem::e4m3> {
  using type = u8;
};
template <>
struct ElemStorage<Elem::e4m3fnuz> {
  using type = u8;
};
template <Elem E>
using storage_t = typename ElemStorage<E>::type;

template <Elem E>
FT_HOST_DEVICE float to_f32(storage_t<E> v) {
  if constexpr (E == Elem::bf16) return bf16_to_f32(v);
  else if constexpr (E == Elem::f16) return f16_to_f32(v);
  else if constexpr (E == Elem::e4m3) return e4m3_to_f32(v);
  else return e4m3fnuz_to_f32(v);
}

template <Elem E>
FT_HOST_DEVICE storage_t<E> from_f32(float v) {
  if constexpr (E == Elem::bf16) return f32_to_bf16(v);
  else if constexpr (E == Elem::f16) return f32_to_f16(v);
  else if constexpr (E == Elem::e4m3) return f32_to_e4m3(v);
  else return f32_to_e4m3fnuz(v);
}

// --- fp8 scaling: one rule for the kernels, the references and the host ---------
//
// A group of values (a token's row, 128 of its values, ...) is quantised with the
// scale amax / max (max: 448 OCP, 240 fnuz), amax the group's largest magnitude
// (an all-zero group takes scale 1); a value's code is the saturating,
// nearest-even encoding of value / scale, and it decodes as code x scale.
// NaN inputs are left out of amax (a > m is false) but encode to NaN.
template <Elem E>
FT_HOST_DEVICE constexpr float fp8_max() {
  static_assert(is_fp8(E), "fp8_max: an fp8 element type");
  return E == Elem::e4m3fnuz ? 240.0f : 448.0f;
}
FT_HOST_DEVICE float abs_max(float m, float v) {
  const float a = v < 0.0f ? -v : v;
  return a > m ? a : m;
}
template <Elem E>
FT_HOST_DEVICE float fp8_scale_of(float amax) {
  return amax > 0.0f ? amax / fp8_max<E>() : 1.0f;
}
template <Elem E>
FT_HOST_DEVICE storage_t<E> fp8_quantise(float v, float scale) {
  return from_f32<E>(v / scale);
}

template <class T, int N>
FT_HOST_DEVICE void copy_bytes(T* dst, const T* src) {
  FT_MEMCPY(dst, src, sizeof(T) * N);
}
// N values at addresses that are multiples of their size (2, 4, 8 or 16 bytes):
// one vector access (FT_MEMCPY_ALIGNED, port.hpp). The rows of X, Y, the
// intermediate and the partials are 16-byte aligned and a copy of 8 values
// starts at a multiple of 8, so the support kernels and epilogues use this.
template <class T, int N>
FT_HOST_DEVICE void copy_aligned(T* dst, const T* src) {
  constexpr unsigned kBytes = sizeof(T) * N;
  static_assert(kBytes == 2 || kBytes == 4 || kBytes == 8 || kBytes == 16, "copy_aligned: 2, 4, 8 or 16 bytes");
  FT_MEMCPY_ALIGNED(dst, src, kBytes);
}

FT_HOST_DEVICE float silu(float g, float e_neg_g) { return g / (1.0f + e_neg_g); }

}  // namespace ft
