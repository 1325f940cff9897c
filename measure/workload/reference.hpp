#pragma once
// The MoE layer on the CPU, computed the way the kernels define it: fp32
// accumulation of the 16-bit inputs; stage 1's SwiGLU output rounded to the
// 16-bit type (the kernels store it so); the routed weight applied in stage 1
// or in stage 2, as the variant does; the k slots of a token summed in fp32.
#include <cstdint>
#include <vector>

#include "measure/workload/workload.hpp"

namespace ft {

struct ReferenceOptions {
  bool weight_in_stage1 = false;  // the routed weight multiplies stage 1's output (else stage 2's)
  unsigned threads = 0;           // 0: the machine's cores
};

struct ReferenceOutput {
  std::vector<std::uint16_t> inter;  // [T*k, I] stage-1 output as stored, row = token*k + slot
  std::vector<float> y;              // [T, H] in fp32, before the final rounding
  std::vector<std::uint16_t> y16;    // [T, H] rounded to the problem's type, as the reduce kernel stores it
};

ReferenceOutput reference_layer(const Workload& w, const ReferenceOptions& options = {});

// The align/sort step on the CPU: which pair ids land in each expert's padded
// run, for comparing with the device's sorted_ids / block_experts / padded_rows.
struct AlignReference {
  int padded_rows = 0;
  std::vector<int> block_experts;             // [padded_rows / align_block]
  std::vector<std::vector<int>> expert_pairs; // [E]: pair ids (token*k + slot) routed to each expert, ascending
  std::vector<int> expert_offset;             // [E + 1]: first row of each expert's run
};
AlignReference reference_align(const Workload& w, int align_block);

}  // namespace ft
