#pragma once
// The weight pre-arrangement on the host: the formulas of
// templates/ft/weight_layout.hpp (shuffled_offset, tiled_offset), repeated
// here because host code does not compile the templates. tests/emu checks
// that both give the same bytes.
#include <cstdint>
#include <span>
#include <vector>

#include "generator/error.hpp"
#include "generator/variant.hpp"

namespace ft {

// Where element (row, k) of a [rows, cols] matrix lives in the shuffled layout:
// 16-row x 8-column (16-byte) blocks stored contiguously, row-block-major.
constexpr long long shuffled_index(long long row, long long k, long long cols) {
  return (((row >> 4) * (cols >> 3) + (k >> 3)) * 16 + (row & 15)) * 8 + (k & 7);
}

// ... in the tiled layout: 64-column slices of all rows, slice-major, each
// row's 16-byte chunks in the 128-byte swizzle (chunk c at c ^ (row % 8)).
constexpr long long tiled_index(long long row, long long k, long long rows) {
  return ((k >> 6) * rows + row) * 64 + ((((k >> 3) & 7) ^ (row & 7)) << 3) + (k & 7);
}

// `src` [rows, cols] row-major -> `layout` (plain: a copy). shuffled:
// rows % 16 == 0, cols % 8 == 0; tiled: rows % 16 == 0, cols % 64 == 0.
Result<std::vector<std::uint16_t>> arrange_weights_host(std::span<const std::uint16_t> src, long long rows, long long cols,
                                                        WeightLayoutKind layout);

}  // namespace ft
