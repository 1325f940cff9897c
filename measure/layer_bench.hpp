#pragma once
// Runs, verifies and times MoE-layer kernels on a Device: the buffers of one
// problem (sized for the largest token count), fresh seeded inputs, the
// reference kernels, poisoned outputs, L2 flushing and event timing.
//
// Every launch goes through the one layer program (layer/program.hpp) and its
// executor: a stage alone (align, the stage, and for stage 2 the reduction)
// or the whole layer, exactly as the export records it and the runtime runs it.
//
// Verification of a stage variant: stage 1 runs after align and its [T*k, I]
// output is compared with the reference intermediate; stage 2 runs on the
// reference intermediate, then the reduce kernel, and Y is compared with the
// reference Y. Outputs are poisoned with NaN first, so an unwritten element
// fails; the align kernel's count of bad routing ids must be zero.
//
// The forward layer's ProgramBench (measure/program_bench.hpp): a program of
// the recipe's stages -- both, the layer; one, that stage alone -- verified
// and timed through the interface the measuring service asks.
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"
#include "device/device.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/workload.hpp"
#include "device/device_buffer.hpp"
#include "layer/execute.hpp"
#include "measure/program_bench.hpp"
#include "measure/timing.hpp"

namespace ft {

class LayerBench final : public ProgramBench {
 public:
  // Loads the support unit (emit_support) and allocates buffers for up to
  // max_tokens tokens.
  static Result<std::unique_ptr<LayerBench>> create(Device& dev, const Problem& problem, const Target& target,
                                                    std::span<const std::byte> support_code_object, int max_tokens);
  ~LayerBench() override;

  // Fresh inputs for `tokens`: X, W1 and W2 from `seed` on the device, routing
  // (topk_ids, topk_weights: [tokens * k]; ids of -1 are empty slots) from the
  // host. Drops cached references.
  Status set_inputs(int tokens, std::uint64_t seed, std::span<const std::int32_t> topk_ids,
                    std::span<const float> topk_weights);
  // The same with the routing of make_routing(problem, tokens, {seed, empty_experts}).
  Status set_inputs(int tokens, std::uint64_t seed, int empty_experts) override;

  // Where buffer b of the current inputs lives (tests read the workspace).
  DevicePtr buffer(Buf b) const { return at(table_, b); }

  // A stage variant alone (its kernel f).
  Result<Comparison> verify_stage(const Variant& v, FunctionHandle f);
  Result<Timing> time_stage(const Variant& v, FunctionHandle f, const TimingOptions& opt);
  // The whole layer: a recipe of the operation's stages, each with its kernel.
  Result<Comparison> verify_layer(const LoadedProgram& p);
  // Its parts: align (with the clears), stage1, stage2, reduce.
  Result<ProgramTiming> time_layer(const LoadedProgram& p, const TimingOptions& opt);
  // ProgramBench: the layer, or a recipe of one stage alone (timed as a whole only).
  Result<ProgramCheck> verify(const LoadedProgram& p) override;
  Result<ProgramTiming> time(const LoadedProgram& p, const TimingOptions& opt) override;

  // Runs align/sort alone and returns what it wrote, for checks against the CPU.
  struct AlignOutput {
    int padded_rows = 0;
    std::vector<std::int32_t> sorted_ids;     // [padded_rows]
    std::vector<std::int32_t> block_experts;  // [padded_rows / align_block]
  };
  Result<AlignOutput> run_align_only(int align_block);

  // The reference outputs, for host-side checks of the reference itself.
  Result<std::vector<std::uint16_t>> reference_output(bool weight_in_stage1);
  // The current inputs copied back into `w` (small problems only), as the CPU
  // reference reads them: X and the 16-bit weights, or an fp8 problem's codes,
  // their scales, the static activation scale and the codes' format.
  Status download_inputs(Workload& w);

  int tokens() const { return tokens_; }

 private:
  LayerBench(Device& dev, const Problem& p, const Target& t);
  // The program of a recipe's stages (the bench's target and problem) at the current T.
  Result<LayerProgram> program(const LayerRecipe& r) const;
  // A stage alone: its one-stage recipe and its kernel in its launch role.
  LoadedProgram stage_alone(const Variant& v, FunctionHandle f) const;
  // The whole layer's two stages, refusing another recipe.
  static Result<std::pair<const Variant*, const Variant*>> layer_stages(const LayerRecipe& r);
  Status run_support(FunctionHandle f, const LaunchShape& s, const void* a, std::size_t n, StreamHandle st = {});
  Status run_align(int align_block, StreamHandle s = {});
  // W1 and W2 in `layout`, arranged on the device on first use; the table's
  // weight entries point at every copy made so far.
  Status ensure_arranged(WeightLayout layout);
  // The reference of a routed-weight placement and (fp8) intermediate scale
  // rule, in slot ref_slot(...) of the reference buffers.
  Status ensure_reference(bool weight_in_stage1, bool row_scales = false);
  // The reference kernels' inputs: X, the routing, the plain weights and the sizes.
  MoeArgs input_args() const;
  static int ref_slot(bool weight_in_stage1, bool row_scales) { return (weight_in_stage1 ? 1 : 0) + (row_scales ? 2 : 0); }
  // Runs a program's steps once and waits; then the align kernel's count of
  // routing ids outside [-1, experts) must be zero.
  Status run_checked(const LayerProgram& p, std::span<const FunctionHandle> fns, const BufferTable& table);
  Status flush_l2(StreamHandle s = {});
  Result<std::vector<std::uint16_t>> download(DevicePtr p, std::size_t count);
  Result<Comparison> compare_with(DevicePtr out, DevicePtr reference, std::size_t count,
                                  std::optional<Tolerance> tolerance = std::nullopt);
  // fp8 problems (layer_bench_fp8.cpp): their support kernels and buffers, the
  // random codes and scales, the reference (the fp32 intermediate quantised as
  // stage 2 reads it), and stage 1's check on the dequantised intermediate.
  Status create_fp8(ModuleHandle support, std::size_t max_tokens);
  Status fill_fp8(std::size_t tokens, std::uint64_t seed, bool weights);
  Status reference_fp8(MoeArgs& a, int slot);
  // The caller's scale tensors and the mode, into a reference kernel's argument.
  void bind_scales_fp8(MoeArgs& a) const;
  // Static scales: the intermediate's scale of this batch, calibrated from the
  // reference's unweighted fp32 intermediate (layer/calibrate.hpp); a no-op in the other modes.
  Status calibrate_fp8();
  Status poison_fp8(const BufferTable& table);
  Status download_fp8(Workload& w);
  Result<Comparison> compare_inter_fp8(const BufferTable& table, int f);

  int max_tokens_ = 0;
  int tokens_ = 0;
  FunctionHandle shuffle_, reference1_, reference2_;  // the step kernels are ProgramBench's support_
  // Inputs, the plain weights, the workspace; arranged weights join on first use.
  std::array<DeviceBuffer, kBufCount> buffers_;
  BufferTable table_{};
  L2Flush flush_;
  std::array<DeviceBuffer, 2> inter_ref_;  // by weight_in_stage1
  std::array<DeviceBuffer, 4> y_ref_;      // by ref_slot
  // fp8: the reference's intermediate quantisation (the quantise steps are
  // support_'s), and its fp32 intermediate, codes and group or row scales (by ref_slot).
  FunctionHandle reference_quantise_;
  DeviceBuffer inter_ref_f32_;
  std::array<DeviceBuffer, 4> inter_ref_q_, inter_ref_scales_;
  std::array<DeviceBuffer, 4> y_bf16_layer_;  // fp8: the bf16 layer on the dequantised weights (the sanity reference)
  std::array<bool, 4> reference_ready_{};
  std::array<bool, 3> arranged_ready_{};  // by WeightLayout
  std::uint64_t seed_ = 0;
};

}  // namespace ft
