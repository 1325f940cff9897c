#include "tuner/workload/shuffle.hpp"

#include <fmt/format.h>

namespace ft {

Result<std::vector<std::uint16_t>> shuffle_weights_host(std::span<const std::uint16_t> src, long long rows, long long cols) {
  if (rows <= 0 || cols <= 0 || rows % 16 != 0 || cols % 8 != 0)
    return fail(Errc::invalid_input, fmt::format("weight shuffle of [{}, {}]: rows must be a multiple of 16 and columns of 8", rows, cols));
  if ((long long)src.size() != rows * cols)
    return fail(Errc::invalid_input, fmt::format("weight shuffle: {} elements given for [{}, {}]", src.size(), rows, cols));
  std::vector<std::uint16_t> out(src.size());
  for (long long r = 0; r < rows; ++r)
    for (long long k = 0; k < cols; ++k) out[std::size_t(shuffled_index(r, k, cols))] = src[std::size_t(r * cols + k)];
  return out;
}

}  // namespace ft
