#pragma once
// Converting an OCP e4m3 checkpoint (float8_e4m3fn weights and their fp32
// scales, as FP8 models ship) for hardware that reads e4m3fnuz (gfx942).
//
// The two formats share the bit layout and differ by one in the exponent bias
// (7 vs 8), so the same bits mean half the value in fnuz: every finite OCP code
// c has value(fnuz, c) = value(ocp, c) / 2 exactly, subnormals included, and
// OCP's largest value (448, 0x7e) is fnuz 224 -- no value is lost. Keeping the
// bytes and doubling every scale therefore keeps every dequantised weight
// (byte value x scale) bit for bit. What does not carry over:
//   - 0x80 is OCP's -0 but fnuz's only NaN: it becomes 0x00 (+0; fnuz has no -0).
//   - OCP's NaNs (0x7f, 0xff) would read as fnuz +-240: they become 0x80, fnuz's
//     NaN, so a NaN stays a NaN (counted; a caller may refuse such a checkpoint).
// A scale must be finite, and twice it too (else the conversion is refused).
// The scales are any granularity (per tensor, per channel, per 128 x 128 block):
// each one is doubled, and which bytes it covers does not matter.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "base/error.hpp"

namespace ft {

struct FnuzCheckpoint {
  std::vector<std::uint8_t> bytes;  // e4m3fnuz codes, one per input byte, same order
  std::vector<float> scales;        // the input scales, each doubled
  std::size_t negative_zeros = 0;   // OCP 0x80 bytes written as 0x00
  std::size_t nans = 0;             // OCP NaN bytes (0x7f, 0xff) written as 0x80
};

Result<FnuzCheckpoint> convert_ocp_to_fnuz(std::span<const std::uint8_t> ocp_bytes, std::span<const float> scales);

// The one byte's conversion (the rule above).
constexpr std::uint8_t ocp_e4m3_byte_to_fnuz(std::uint8_t b) {
  if ((b & 0x7f) == 0x7f) return 0x80;  // NaN stays NaN
  if (b == 0x80) return 0x00;           // -0 -> +0
  return b;
}

}  // namespace ft
