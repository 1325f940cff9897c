#pragma once
// One MoE layer on a Device (a GPU runtime or the emulator), with the host
// launch sequence every backend shares:
//   poison the outputs (NaN), zero the fp32 sums (atomic mode),
//   align (1 block) -> stage 1 -> stage 2 -> reduce, read Y back.
// Launch shapes come from generator/launch.hpp, the formulas the export uses.
#include <cstdint>
#include <optional>
#include <vector>

#include "generator/variant.hpp"
#include "tuner/device/device.hpp"
#include "tuner/layer/device_buffer.hpp"
#include "tuner/workload/compare.hpp"
#include "tuner/workload/reference.hpp"
#include "tuner/workload/workload.hpp"

namespace ft {

// A workload's tensors on a device (weights also in the shuffled or tiled
// layout, built on first use on the host), plus the layer's scratch buffers.
class DeviceWorkload {
 public:
  static Result<DeviceWorkload> upload(Device& device, const Workload& workload);

  Device& device() const { return *device_; }
  const Workload& workload() const { return *workload_; }
  // W1 (which = 1) or W2 (which = 2) in the given layout.
  Result<DevicePtr> weights(int which, WeightLayoutKind layout);

  DeviceBuffer x, topk_ids, topk_weights, inter, y_acc, y, padded_rows;

 private:
  Device* device_ = nullptr;
  const Workload* workload_ = nullptr;
  DeviceBuffer w1_[3], w2_[3];  // by WeightLayoutKind: plain, shuffled, tiled
};

struct LayerKernels {
  FunctionHandle align, stage1, stage2, reduce;  // reduce: the entry for stage 2's reduction and the dtype
};

struct LayerPlan {
  Variant stage1, stage2;
  int align_block = 0;  // rows per expert block; 0: the larger tile_m (a multiple of both)
  int effective_align_block() const;
  // Kinds, dtypes and the routed-weight placement agree; tiles divide the problem.
  Status validate(const Problem& problem) const;
};

struct LayerRunOptions {
  bool read_intermediates = false;  // also copy back inter, sorted_ids, block_experts
  StreamHandle stream{};
};

struct LayerResult {
  std::vector<std::uint16_t> y;  // [T, H]
  int padded_rows = 0;
  std::vector<std::uint16_t> inter;        // with read_intermediates
  std::vector<std::int32_t> sorted_ids;    // with read_intermediates
  std::vector<std::int32_t> block_experts; // with read_intermediates
};

Result<LayerResult> run_layer(DeviceWorkload& dw, const LayerKernels& kernels, const LayerPlan& plan,
                              const LayerRunOptions& options = {});

// Runs the layer and compares Y with `reference` (which must be computed for the
// plan's routed-weight placement). A failed comparison is a result
// (passed = false), not an error; errors are launch or device failures.
Result<Comparison> verify_layer(DeviceWorkload& dw, const LayerKernels& kernels, const LayerPlan& plan,
                                const ReferenceOutput& reference);

// The align kernel alone (align_block rows per expert block).
struct AlignResult {
  int padded_rows = 0;
  std::vector<std::int32_t> sorted_ids;     // [padded_rows]
  std::vector<std::int32_t> block_experts;  // [padded_rows / align_block]
};
Result<AlignResult> run_align(DeviceWorkload& dw, FunctionHandle align, int align_block);

// The weight pre-arrangement kernel on `src` [rows, cols], into `layout`
// (shuffled or tiled).
Result<std::vector<std::uint16_t>> run_shuffle(Device& device, FunctionHandle shuffle, std::span<const std::uint16_t> src,
                                               long long rows, long long cols,
                                               WeightLayoutKind layout = WeightLayoutKind::shuffled);

}  // namespace ft
