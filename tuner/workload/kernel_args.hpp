#pragma once
// Host mirrors of the kernels' by-value argument structs (templates/ft/moe_args.hpp),
// with device pointers as 64-bit integers. The layouts must match byte for byte:
// the emulator checks the size at every launch, and tests/emu runs whole layers
// through these structs.
#include <cstddef>
#include <cstdint>

namespace ft {

struct MoeArgsHost {
  std::uint64_t x = 0;              // [T, H]
  std::uint64_t topk_ids = 0;       // [T, k] int32
  std::uint64_t topk_weights = 0;   // [T, k] fp32
  std::uint64_t w1 = 0;             // [E, 2I, H]
  std::uint64_t w2 = 0;             // [E, H, I]
  std::uint64_t inter = 0;          // [T*k, I]
  std::uint64_t y_acc = 0;          // atomic: [T, H] fp32; partials: [T*k, H] fp32
  std::uint64_t y = 0;              // [T, H]
  std::uint64_t sorted_ids = 0;     // [max_padded_rows] int32
  std::uint64_t block_experts = 0;  // [max_padded_rows / align_block] int32
  std::uint64_t padded_rows = 0;    // [1] int32
  std::int32_t tokens = 0;
  std::int32_t hidden = 0;
  std::int32_t inter_size = 0;
  std::int32_t experts = 0;
  std::int32_t topk = 0;
  std::int32_t align_block = 0;
  std::int32_t max_padded_rows = 0;
  std::int32_t flags = 0;            // bit 0: routed weight in stage 1 (reference kernels only)
};
static_assert(sizeof(MoeArgsHost) == 120 && offsetof(MoeArgsHost, tokens) == 88 && offsetof(MoeArgsHost, flags) == 116,
              "MoeArgsHost must match ft::MoeArgs");

struct ShuffleArgsHost {
  std::uint64_t src = 0;
  std::uint64_t dst = 0;
  std::int32_t rows = 0;
  std::int32_t cols = 0;
  std::int32_t layout = 1;  // WeightLayoutKind of dst: 1 shuffled, 2 tiled
  std::int32_t reserved = 0;
};
static_assert(sizeof(ShuffleArgsHost) == 32, "ShuffleArgsHost must match ft::ShuffleArgs");

}  // namespace ft
