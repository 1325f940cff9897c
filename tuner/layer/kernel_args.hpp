#pragma once
// The fill kernel's argument (templates/ft/random_fill.hpp), host side. The
// layer kernels' argument structs are in tuner/workload/kernel_args.hpp.
#include <cstdint>

#include "tuner/workload/kernel_args.hpp"

namespace ft {

struct FillArgsHost {
  std::uint64_t dst = 0;
  std::uint64_t count = 0, seed = 0;
  float scale = 0;
  std::int32_t elem = 0;  // 0 bf16, 1 f16
};
static_assert(sizeof(FillArgsHost) == 32, "FillArgsHost must match ft::FillArgs");

inline constexpr std::int32_t kFlagWeightInStage1 = 1;  // ft::kFlagWeightInStage1 (MoeArgs::flags)

}  // namespace ft
