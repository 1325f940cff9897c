#pragma once
// The weight pre-arrangement on the host, with the kernels' own offsets
// (templates/ft/weight_layout.hpp through generator/device_facts.hpp); tests/emu
// checks the arrange kernels give the same bytes.
#include <cstdint>
#include <span>
#include <vector>

#include "base/error.hpp"
#include "generator/variant.hpp"
#include "generator/device_facts.hpp"

namespace ft {

// Where element (row, k) of a [rows, cols] matrix lives in the shuffled and
// tiled layouts (weight_layout.hpp's shuffled_offset / tiled_offset).
inline long long shuffled_index(long long row, long long k, long long cols) { return shuffled_offset(row, k, cols); }
inline long long tiled_index(long long row, long long k, long long rows) { return tiled_offset(row, k, rows); }

// `src` [rows, cols] row-major -> `layout` (plain: a copy). shuffled:
// rows % 16 == 0, cols % 8 == 0; tiled: rows % 16 == 0, cols % 64 == 0.
Result<std::vector<std::uint16_t>> arrange_weights_host(std::span<const std::uint16_t> src, long long rows, long long cols,
                                                        WeightLayout layout);

}  // namespace ft
