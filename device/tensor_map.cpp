#include "device/tensor_map.hpp"

#include "device/device.hpp"

#include <fmt/format.h>

namespace ft {

std::optional<std::string> why_bad_tensor_map(const TensorMapSpec& s) {
  if (s.elem_bytes != 1 && s.elem_bytes != 2 && s.elem_bytes != 4)
    return fmt::format("a tensor map's element is 1, 2 or 4 bytes, not {}", s.elem_bytes);
  if (s.swizzle != 0 && s.swizzle != 32 && s.swizzle != 64 && s.swizzle != 128)
    return fmt::format("a tensor map's swizzle span is 0, 32, 64 or 128 bytes, not {}", s.swizzle);
  if (s.base % 16 != 0) return fmt::format("a tensor map's base address {:#x} is not 16-byte aligned", s.base);
  if (s.cols == 0 || s.rows == 0) return fmt::format("a tensor map of an empty matrix ({} x {})", s.rows, s.cols);
  if (s.row_stride_bytes % 16 != 0 || s.row_stride_bytes >= (std::uint64_t(1) << 40))
    return fmt::format("a tensor map's row stride ({} bytes) is a multiple of 16 below 2^40", s.row_stride_bytes);
  if (s.row_stride_bytes < std::uint64_t(s.cols) * s.elem_bytes)
    return fmt::format("a tensor map's rows ({} bytes apart) overlap: {} elements of {} bytes", s.row_stride_bytes,
                       s.cols, s.elem_bytes);
  if (s.box_cols == 0 || s.box_rows == 0 || s.box_cols > 256 || s.box_rows > 256)
    return fmt::format("a tensor map's box ({} x {}) is 1 to 256 elements each way", s.box_rows, s.box_cols);
  const std::uint32_t inner = s.box_cols * s.elem_bytes;
  if (inner % 16 != 0) return fmt::format("a tensor map's box rows ({} bytes) are not a multiple of 16 bytes", inner);
  if (s.swizzle && inner > s.swizzle)
    return fmt::format("a tensor map's box rows ({} bytes) are wider than its {}-byte swizzle", inner, s.swizzle);
  return std::nullopt;
}

Status Device::encode_tensor_map(const TensorMapSpec&, std::span<std::byte, kTensorMapBytes>) {
  return fail(Errc::device, fmt::format("{} ({}) has no tensor maps: the TMA unit is sm_90a's", info().name, info().arch));
}

}  // namespace ft
