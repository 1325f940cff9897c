#pragma once
// Same-machine ceilings for roofline floors: the dense 16-bit GEMM rate and
// the HBM copy bandwidth, as measured on a GPU (not datasheet numbers). Known
// GPUs come from measurements recorded in docs/PERFORMANCE.md; others need
// --ceilings TFLOPS,TBPS or get no floor.
#include <optional>
#include <string_view>

#include "generator/problem.hpp"

namespace ft {

struct Ceilings {
  double gemm_flops = 0;  // FLOP/s, dense bf16
  double hbm_bytes = 0;   // bytes/s, copy (read + write)
};

std::optional<Ceilings> measured_ceilings(std::string_view device_name);

// max(FLOPs / rate, bytes of the active experts' weights (+ X and Y) / bandwidth), in microseconds.
double roofline_floor_us(const Problem& p, int tokens, const Ceilings& c);

}  // namespace ft
