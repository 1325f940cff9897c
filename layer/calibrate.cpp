#include "layer/calibrate.hpp"

#include <algorithm>
#include <vector>

namespace ft {

Result<float> static_scale_of(Device& d, DevicePtr values, std::size_t count, Elem format) {
  constexpr std::size_t kChunk = std::size_t(1) << 22;  // floats: 16 MiB
  std::vector<float> buf(std::min(count, kChunk));
  float m = 0.0f;
  for (std::size_t at = 0; at < count; at += kChunk) {
    const std::size_t n = std::min(kChunk, count - at);
    FT_CHECK(d.copy_to_host(buf.data(), values + at * 4, n * 4));
    for (std::size_t i = 0; i < n; ++i) m = abs_max(m, buf[i]);
  }
  return format == Elem::e4m3fnuz ? fp8_scale_of<Elem::e4m3fnuz>(m) : fp8_scale_of<Elem::e4m3>(m);
}

}  // namespace ft
