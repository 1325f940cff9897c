#pragma once
// Per-kernel resource facts from an AMDGPU code object's NT_AMDGPU_METADATA
// note (msgpack), read through comgr's metadata API.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace ft {

struct AmdKernelMetadata {
  std::string name;    // .name
  std::string symbol;  // .symbol (the kernel descriptor, "<name>.kd")
  int vgpr_count = 0;  // .vgpr_count: on gfx90a+ the unified count, AGPRs included
  int agpr_count = 0;
  int sgpr_count = 0;
  int group_segment_fixed_size = 0;    // static LDS bytes
  int private_segment_fixed_size = 0;  // scratch bytes per lane
  int vgpr_spill_count = 0;
  int sgpr_spill_count = 0;
  int wavefront_size = 0;
  int max_flat_workgroup_size = 0;
  bool uses_dynamic_stack = false;
};

// Errc::toolchain when comgr is missing; Errc::invalid_input for an object
// without kernel metadata.
Result<std::vector<AmdKernelMetadata>> read_amdgpu_metadata(std::span<const std::byte> code_object);

}  // namespace ft
