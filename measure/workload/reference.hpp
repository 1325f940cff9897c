#pragma once
// The MoE layer on the CPU, computed the way the kernels define it: fp32
// accumulation of the 16-bit inputs; stage 1's SwiGLU output rounded to the
// 16-bit type (the kernels store it so); the routed weight applied in stage 1
// or in stage 2, as the variant does; the k slots of a token summed in fp32.
// fp8 problems: fp32 from the dequantised values the kernels see, as the
// device's fp8 reference kernels (templates/ft/reference.hpp): X quantised by
// the layer's rule, codes times scales, the fp32 intermediate quantised in
// 1 x 128 groups (one scale per row, or static: the workload's inter_scale) before stage 2.
#include <cstdint>
#include <span>
#include <vector>

#include "measure/workload/workload.hpp"

namespace ft {

struct ReferenceOptions {
  bool weight_in_stage1 = false;  // the routed weight multiplies stage 1's output (else stage 2's)
  unsigned threads = 0;           // 0: the machine's cores
  // fp8 problems: false gives the bf16 layer on the same dequantised weights
  // (X unquantised, the intermediate rounded to bf16 instead of quantised): the
  // sanity reference an fp8 layer is held to by fp8_sanity_tolerance.
  bool quantise_activations = true;
  // fp8: the intermediate quantised with one scale per row (each of its I/128
  // slots holds it), as for a stage 2 reading row scales (InterScales::row).
  bool inter_row_scales = false;
};

struct ReferenceOutput {
  std::vector<std::uint16_t> inter;  // [T*k, I] stage-1 output as stored, row = token*k + slot (16-bit problems)
  std::vector<float> y;              // [T, H] in fp32, before the final rounding
  std::vector<std::uint16_t> y16;    // [T, H] rounded to the problem's type (bf16 for fp8), as the reduce kernel stores it
  // fp8 problems: the intermediate in fp32, and quantised as stage 2 reads it.
  std::vector<float> inter_f32;          // [T*k, I]
  std::vector<std::uint8_t> inter_q;     // [T*k, I] e4m3 codes (the workload's format)
  std::vector<float> inter_scales;       // [T*k, I/128]
};

// X of an fp8 workload as the layer quantises it (quantise_x's rule): the
// dequantised values [T, H].
std::vector<float> dequantised_x(const Workload& w);
// The static intermediate scale of a static-scale fp8 workload, calibrated as
// the peer bench does (bench/triton_moe_fp8.py calibrate_h_scale): the absolute
// max of the batch's reference intermediate -- X as the layer quantises it, the
// dequantised W1, before the routed weight -- over the format's max.
float calibrated_inter_scale(const Workload& w, unsigned threads = 0);
// Codes times their group scales: [rows, K] from [rows, K] codes and [rows, K/128] scales.
std::vector<float> dequantise_rows(std::span<const std::uint8_t> codes, std::span<const float> scales, long long K,
                                   Elem format);

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
