#include "generator/fp8_checkpoint.hpp"

#include <cmath>

#include <fmt/format.h>

namespace ft {

Result<FnuzCheckpoint> convert_ocp_to_fnuz(std::span<const std::uint8_t> ocp_bytes, std::span<const float> scales) {
  FnuzCheckpoint out;
  out.scales.reserve(scales.size());
  for (std::size_t i = 0; i < scales.size(); ++i) {
    const float doubled = scales[i] * 2.0f;  // exact unless it overflows
    if (!std::isfinite(scales[i]) || !std::isfinite(doubled))
      return fail(Errc::invalid_input,
                  fmt::format("scale {} is {}: an fnuz checkpoint needs twice every scale, finite", i, scales[i]),
                  "convert_ocp_to_fnuz");
    out.scales.push_back(doubled);
  }
  out.bytes.reserve(ocp_bytes.size());
  for (std::uint8_t b : ocp_bytes) {
    out.negative_zeros += b == 0x80;
    out.nans += (b & 0x7f) == 0x7f;
    out.bytes.push_back(ocp_e4m3_byte_to_fnuz(b));
  }
  return out;
}

}  // namespace ft
