#pragma once
// One MoE layer of a host workload on a Device (a GPU runtime or the
// emulator): poison the outputs (NaN), run the one layer program
// (layer/program.hpp) through its executor, read Y back. The tests of the
// emulator run layers this way: the steps are the ones the search times and
// the runtime launches.
#include <cstdint>
#include <optional>
#include <vector>

#include "generator/variant.hpp"
#include "layer/execute.hpp"
#include "device/device.hpp"
#include "device/device_buffer.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/reference.hpp"
#include "measure/workload/workload.hpp"

namespace ft {

// A workload's tensors on a device (weights also in the shuffled or tiled
// layout, built on first use on the host), plus the layer's scratch buffers.
class DeviceWorkload {
 public:
  static Result<DeviceWorkload> upload(Device& device, const Workload& workload);

  Device& device() const { return *device_; }
  const Workload& workload() const { return *workload_; }
  // W1 (which = 1) or W2 (which = 2) in the given layout.
  Result<DevicePtr> weights(int which, WeightLayout layout);

  // The program's buffer table: inputs, the weights arranged so far and the
  // workspace (sorted_ids and block_experts sized for kMaxAlignBlock).
  const BufferTable& table() const { return table_; }

  DeviceBuffer x, topk_ids, topk_weights, inter, y_acc, y, padded_rows, sorted_ids, block_experts, bad_ids, tile_tickets;
  // fp8 workloads: the scales and the quantise steps' workspace.
  DeviceBuffer x_scale, w1_scales, w2_scales, xq, x_scales, inter_q, inter_scales;
  DeviceBuffer inter_scale;  // static scales: the workload's [1]

 private:
  Device* device_ = nullptr;
  const Workload* workload_ = nullptr;
  DeviceBuffer w1_[3], w2_[3];  // by WeightLayout: plain, shuffled, tiled
  BufferTable table_{};
};

// The two stages of a layer; the program derives everything else.
struct LayerPlan {
  Variant stage1, stage2;
  LayerRecipe recipe(const Problem& problem) const { return {stage1.target, problem, {stage1, stage2}}; }
};

struct LayerRunOptions {
  bool read_intermediates = false;  // also copy back inter, sorted_ids, block_experts
  StreamHandle stream{};
  // Mutant tests: changes the built program before it runs (null: none).
  void (*edit_program)(LayerProgram&) = nullptr;
};

struct LayerResult {
  std::vector<std::uint16_t> y;  // [T, H] (bf16 for fp8 problems)
  int padded_rows = 0;
  int bad_ids = -1;                        // the align kernel's count of ids outside [-1, experts)
  std::vector<std::uint16_t> inter;        // with read_intermediates
  std::vector<std::int32_t> sorted_ids;    // with read_intermediates
  std::vector<std::int32_t> block_experts; // with read_intermediates
  std::vector<std::uint8_t> inter_q;       // fp8, with read_intermediates: [T*k, I] codes
  std::vector<float> inter_scales;         // fp8, with read_intermediates: [T*k, I/128]
};

Result<LayerResult> run_layer(DeviceWorkload& dw, const RoleKernels& kernels, const LayerPlan& plan,
                              const LayerRunOptions& options = {});

// Runs the layer and compares Y with `reference` (which must be computed for the
// plan's routed-weight placement). A failed comparison is a result
// (passed = false), not an error; errors are launch or device failures.
Result<Comparison> verify_layer(DeviceWorkload& dw, const RoleKernels& kernels, const LayerPlan& plan,
                                const ReferenceOutput& reference);

// The align kernel alone (align_block rows per expert block).
struct AlignResult {
  int padded_rows = 0;
  std::vector<std::int32_t> sorted_ids;     // [padded_rows]
  std::vector<std::int32_t> block_experts;  // [padded_rows / align_block]
  std::int32_t bad_ids = -1;                // the count of ids outside [-1, experts) align wrote
};
// The align step(s) of `form` (align, or align_count + align_scatter, from `align`).
Result<AlignResult> run_align(DeviceWorkload& dw, const Target& target, const RoleKernels& align, int align_block,
                              AlignForm form);

// The weight pre-arrangement kernel on `src` [rows, cols], into `layout`
// (shuffled or tiled).
Result<std::vector<std::uint16_t>> run_shuffle(Device& device, FunctionHandle shuffle, std::span<const std::uint16_t> src,
                                               long long rows, long long cols,
                                               WeightLayout layout = WeightLayout::shuffled);

}  // namespace ft
