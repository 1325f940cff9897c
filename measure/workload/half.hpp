#pragma once
// 16-bit float conversions on the host: the kernels' own functions
// (templates/ft/numeric.hpp through generator/device_facts.hpp) under the host's names
// and types: round to nearest even, NaN stays NaN, overflow to infinity, f16
// subnormals kept.
#include <cstdint>

#include "generator/problem.hpp"
#include "generator/device_facts.hpp"

namespace ft {

inline float bf16_bits_to_f32(std::uint16_t h) { return bf16_to_f32(h); }
inline std::uint16_t f32_to_bf16_bits(float f) { return f32_to_bf16(f); }
inline float f16_bits_to_f32(std::uint16_t h) { return f16_to_f32(h); }
inline std::uint16_t f32_to_f16_bits(float f) { return f32_to_f16(f); }

// The 16-bit type of a problem's activations and outputs: f16, or bf16 (bf16 and fp8 problems).
inline float half_to_f32(DType d, std::uint16_t h) { return d == DType::f16 ? f16_bits_to_f32(h) : bf16_bits_to_f32(h); }
inline std::uint16_t f32_to_half(DType d, float f) { return d == DType::f16 ? f32_to_f16_bits(f) : f32_to_bf16_bits(f); }

}  // namespace ft
