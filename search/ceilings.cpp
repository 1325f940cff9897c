#include "search/ceilings.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace ft {

std::optional<Ceilings> measured_ceilings(std::string_view name) {
  // NVIDIA H200: dense bf16 GEMM 8192^3 811 TFLOP/s, device-to-device copy
  // 4.24 TB/s, measured in one run on the device machine (../shared/REFERENCE.md).
  static constexpr std::array<std::pair<std::string_view, Ceilings>, 1> kKnown{{{"NVIDIA H200", {811e12, 4.24e12}}}};
  for (const auto& [n, c] : kKnown)
    if (name == n) return c;
  return std::nullopt;
}

double roofline_floor_us(const Problem& p, int tokens, const Ceilings& c) {
  const double flops = p.flops(tokens);
  const double bytes = p.weight_bytes_active(tokens) + 2.0 * tokens * p.hidden * p.element_bytes();
  return std::max(flops / c.gemm_flops, bytes / c.hbm_bytes) * 1e6;
}

}  // namespace ft
