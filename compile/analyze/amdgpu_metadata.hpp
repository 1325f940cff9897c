#pragma once
// Per-kernel resource and launch facts from an AMDGPU code object's
// NT_AMDGPU_METADATA note (msgpack), read through comgr's metadata API: the
// analysis reads the resources, the HIP test double (tests/hip) the kernel
// argument layout and launch limits it checks every launch against.
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace ft {

// One entry of a kernel's .args: where the runtime puts it in the kernarg segment.
struct AmdKernelArg {
  int offset = 0;          // .offset
  int size = 0;            // .size
  std::string value_kind;  // .value_kind: "by_value", "global_buffer", "hidden_block_count_x", ...
  bool hidden() const { return value_kind.starts_with("hidden_"); }
};

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
  int kernarg_segment_size = 0;   // .kernarg_segment_size: explicit and hidden arguments
  int kernarg_segment_align = 0;  // .kernarg_segment_align
  std::vector<AmdKernelArg> args;  // .args, in order (hidden ones included)
};

struct AmdCodeObjectMetadata {
  std::string target;  // amdhsa.target: "amdgcn-amd-amdhsa--gfx942"
  std::vector<AmdKernelMetadata> kernels;
};

// Errc::toolchain when comgr is missing; Errc::invalid_input for an object
// without kernel metadata.
Result<std::vector<AmdKernelMetadata>> read_amdgpu_metadata(std::span<const std::byte> code_object);
// The same with the code object's target.
Result<AmdCodeObjectMetadata> read_amdgpu_code_object_metadata(std::span<const std::byte> code_object);

}  // namespace ft
