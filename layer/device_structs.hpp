#pragma once
// The kernels' argument structs and the support kernels' block sizes, taken
// from the device headers themselves (templates/ft/moe_args.hpp): the host
// fills the very structs the kernels read, so there is no mirror to drift.
// Device pointers are 64 bits on every host flytune runs on, so the layout is
// the device's byte for byte; the export manifest documents it.
#include <cstddef>
#include <cstdint>

#include "templates/ft/int_types.hpp"
#include "templates/ft/moe_args.hpp"
#include "templates/ft/moe_backward_args.hpp"
#include "templates/ft/tensor_map.hpp"
#include "templates/ft/moe_mapped_args.hpp"
#include "device/tensor_map.hpp"

namespace ft {

static_assert(sizeof(void*) == 8, "flytune hosts pass 64-bit device pointers");
// Pinned: the manifest documents these layouts and exported kernels read them.
static_assert(sizeof(MoeArgs) == 208 && offsetof(MoeArgs, tokens) == 88 && offsetof(MoeArgs, flags) == 116 &&
                  offsetof(MoeArgs, bad_ids) == 120 && offsetof(MoeArgs, x_scale) == 128 &&
                  offsetof(MoeArgs, scales) == 184 && offsetof(MoeArgs, inter_scale) == 192 && offsetof(MoeArgs, tile_tickets) == 200,
              "ft::MoeArgs is append-only");
static_assert(sizeof(ShuffleArgs) == 32, "ft::ShuffleArgs is append-only");
static_assert(sizeof(FillArgs) == 40 && offsetof(FillArgs, elem) == 28 && offsetof(FillArgs, group) == 32,
              "ft::FillArgs is append-only");

static_assert(sizeof(TensorMap) == kTensorMapBytes && alignof(TensorMap) == 64,
              "ft::TensorMap is the bytes Device::encode_tensor_map writes, 64-byte aligned as the TMA unit reads them");
static_assert(offsetof(MappedMoeArgs, weights) == 0 && offsetof(MappedMoeArgs, moe) == 128 && sizeof(MappedMoeArgs) == 384,
              "ft::MappedMoeArgs is append-only");

// A device address (ft::DevicePtr) as the typed pointer a struct field holds.
template <class T>
T* device_pointer(std::uint64_t address) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

}  // namespace ft
