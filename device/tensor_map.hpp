#pragma once
// Tensor maps on the host (issue 49): the matrix and box a kernel's TMA copies
// read and write. why_bad_tensor_map holds the TMA unit's rules -- the ones the
// driver's cuTensorMapEncodeTiled refuses a map for -- so the emulated device
// refuses what a GPU would; Device::encode_tensor_map writes the kTensorMapBytes
// of an ft::TensorMap (templates/ft/tensor_map.hpp, the device side, which
// layer/device_structs.hpp holds to this size): the driver's encoding on CUDA,
// TensorMapEmu on the emulator; other devices have none.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace ft {

inline constexpr std::size_t kTensorMapBytes = 128;  // the driver's CUtensorMap

// A row-major 2-D matrix in device memory and the box one copy moves.
struct TensorMapSpec {
  std::uint64_t base = 0;              // the first element's device address
  std::uint64_t row_stride_bytes = 0;  // from one row to the next
  std::uint32_t cols = 0, rows = 0;    // the matrix's extent, in elements
  std::uint32_t box_cols = 0, box_rows = 0;
  std::uint32_t elem_bytes = 2;        // 1, 2 or 4
  std::uint32_t swizzle = 128;         // the shared-memory swizzle span in bytes: 0, 32, 64 or 128
};

// One line saying which rule a spec breaks, or nothing.
std::optional<std::string> why_bad_tensor_map(const TensorMapSpec& s);

// The bytes a load of the box fills in shared memory (the mbarrier's expected bytes).
inline std::uint32_t box_bytes(const TensorMapSpec& s) { return s.box_cols * s.box_rows * s.elem_bytes; }

}  // namespace ft
