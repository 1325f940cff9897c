#pragma once
// The weight pre-shuffle on the host: the formula of templates/ft/weight_layout.hpp
// (shuffled_offset), repeated here because host code does not compile the
// templates. tests/emu checks that both give the same bytes.
#include <cstdint>
#include <span>
#include <vector>

#include "generator/error.hpp"

namespace ft {

// Where element (row, k) of a [rows, cols] matrix lives in the shuffled layout:
// 16-row x 8-column (16-byte) blocks stored contiguously, row-block-major.
constexpr long long shuffled_index(long long row, long long k, long long cols) {
  return (((row >> 4) * (cols >> 3) + (k >> 3)) * 16 + (row & 15)) * 8 + (k & 7);
}

// `src` [rows, cols] row-major -> the shuffled layout. rows % 16 == 0, cols % 8 == 0.
Result<std::vector<std::uint16_t>> shuffle_weights_host(std::span<const std::uint16_t> src, long long rows, long long cols);

}  // namespace ft
