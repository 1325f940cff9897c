#include "measure/workload/shuffle.hpp"

#include <fmt/format.h>

namespace ft {

Result<std::vector<std::uint16_t>> arrange_weights_host(std::span<const std::uint16_t> src, long long rows, long long cols,
                                                        WeightLayout layout) {
  const int col_unit = layout == WeightLayout::tiled ? 64 : 8;
  if (rows <= 0 || cols <= 0 || rows % 16 != 0 || cols % col_unit != 0)
    return fail(Errc::invalid_input, fmt::format("{} weights of [{}, {}]: rows must be a multiple of 16 and columns of {}",
                                                 to_string(layout), rows, cols, col_unit));
  if ((long long)src.size() != rows * cols)
    return fail(Errc::invalid_input, fmt::format("{} weights: {} elements given for [{}, {}]", to_string(layout), src.size(), rows, cols));
  if (layout == WeightLayout::plain) return std::vector<std::uint16_t>(src.begin(), src.end());
  std::vector<std::uint16_t> out(src.size());
  for (long long r = 0; r < rows; ++r)
    for (long long k = 0; k < cols; ++k) {
      const long long to = layout == WeightLayout::tiled ? tiled_index(r, k, rows) : shuffled_index(r, k, cols);
      out[std::size_t(to)] = src[std::size_t(r * cols + k)];
    }
  return out;
}

}  // namespace ft
