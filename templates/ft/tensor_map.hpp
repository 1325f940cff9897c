#pragma once
// Tensor maps (issue 49): what the Hopper TMA unit reads a box of a row-major
// 2-D matrix through, into shared memory, and writes one back through
// (port_cuda.hpp / port_emu.hpp: tensor_load_2d, tensor_store_2d). A device
// struct shared with the host: the host encodes one (Device::encode_tensor_map,
// the rules in tensor_map_rules.hpp) and passes it in a kernel's argument struct.
//   sm_90a: the 128 bytes are the driver's encoding (CUtensorMap, made by
//           cuTensorMapEncodeTiled), read by cp.async.bulk.tensor;
//   EMU:    they hold TensorMapEmu, which the emulated device writes and the
//           emulator's port reads, so the box, the swizzle and the zero fill of
//           rows and columns outside the matrix are modelled in CI.
// A box of box_rows x box_cols elements lands in shared memory as box_rows rows
// of box_cols * elem_bytes bytes each, back to back, with the swizzle applied to
// the byte offsets from the destination (1024-aligned for the 128-byte swizzle).
// Needs ft/int_types.hpp first, as the argument structs do (moe_args.hpp).
#ifndef FT_HOST_DEVICE  // included by host code (device/tensor_map.hpp) before any port
#define FT_HOST_DEVICE inline
#endif

namespace ft {

struct alignas(64) TensorMap {
  unsigned char bytes[128];
};
static_assert(sizeof(TensorMap) == 128, "a tensor map is the driver's 128 bytes");

// The shared-memory swizzles the TMA unit and wgmma share: the 16-byte chunk
// bits [4, 4 + b) of a byte offset are XORed with its bits [7, 7 + b), b = 3, 2
// or 1 for a 128-, 64- or 32-byte swizzle span; span 0: none.
FT_HOST_DEVICE constexpr u32 swizzle_offset(u32 logical, int span) {
  const u32 mask = span == 128 ? 7u : span == 64 ? 3u : span == 32 ? 1u : 0u;
  return logical ^ (((logical >> 7) & mask) << 4);
}

// The 128-byte swizzle on a shared-memory byte address, which the wgmma
// descriptors (atom_wgmma.hpp) read: the 16-byte chunk bits [4, 7) are XORed
// with the row bits [7, 10).
FT_HOST_DEVICE constexpr u32 swizzle128(u32 logical) { return swizzle_offset(logical, 128); }

// Byte offset, from a 1024-aligned tile base, of element (row, k) of a
// K-major tile with 128-byte rows in the 128-byte swizzle: 64 elements of two
// bytes, or 128 of one (elem_bytes = 1, e4m3).
FT_HOST_DEVICE constexpr u32 swizzle128_offset(int row, int k, int elem_bytes = 2) {
  return swizzle128(u32(row) * 128 + u32(k) * u32(elem_bytes));
}

// Byte offset, from a 1024-aligned operand base, of element (mn, k) of an
// MN-major tile `depth` values deep in k, in the layout wgmma_descriptor_mn
// describes with lbo = depth / 8 * 1024 and sbo = 1024.
FT_HOST_DEVICE constexpr u32 swizzle128_mn_offset(int mn, int k, int depth) {
  return swizzle128(u32(mn / 64) * u32(depth / 8) * 1024u + u32(k / 8) * 1024u + u32(k % 8) * 128u + u32(mn % 64) * 2u);
}

// The emulator's encoding in TensorMap::bytes.
inline constexpr u32 kTensorMapEmuMagic = 0x544d4150u;  // "TMAP"
struct TensorMapEmu {
  u64 base;              // the matrix's first element (device address)
  u64 row_stride_bytes;  // from one row to the next
  u32 cols, rows;        // the matrix's extent, in elements
  u32 box_cols, box_rows;
  u32 elem_bytes;        // 1, 2 or 4
  u32 swizzle;           // span in bytes: 0, 32, 64 or 128
  u32 magic;             // kTensorMapEmuMagic: written by the emulated device's encoder
  u32 unused;
};
static_assert(sizeof(TensorMapEmu) <= sizeof(TensorMap), "the emulator's encoding fits the driver's 128 bytes");

}  // namespace ft
