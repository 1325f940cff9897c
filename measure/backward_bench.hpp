#pragma once
// Runs, verifies and times the backward program (layer/backward.hpp,
// op::moe_backward) on a Device, as LayerBench does the forward's: every
// launch is a step of build_backward_program run by layer/execute.
//
// Inputs: a seeded layer (workload/workload.hpp: X, W1, W2, the routing with
// the last `empty_experts` experts left without tokens) and dY, with the
// forward's saved tensors (the pre-activations [gate; up] and the
// intermediate) from the fp32 CPU backward (workload/backward_reference.hpp,
// moe_backward) rounded to the 16-bit type, as a forward would have stored
// them. That backward is the reference, computed by the first verification
// of the inputs and never for timing: a timed program reads saved tensors
// made on the device by the support unit's forward_saved (templates/ft/
// moe_saved.hpp: the same values up to the order of the fp32 sums), and a
// program without dgrad2 reads seeded d_gate_up values (0.01 N(0, 1)) -- so a
// search times Mixtral's layer at 16384 tokens without ~25 TFLOP of CPU
// loops. Verification poisons every output
// and the workspace with NaN (the sorted rows zeroed), runs the whole program
// once and compares every buffer a role writes (the operation's rows) with
// compare.hpp's 16-bit bounds -- dX and d(topk_weights) as fp32 (the latter
// relative to its terms: routed_weight_tolerance), dW1 and dW2
// in the form set_weight_grads names (fp32, or 16-bit: the search's),
// d_gate_up on the routed pairs' rows; its other rows must keep their poison.
// Timing: as the forward's (timing.hpp): events around the whole program and between its steps,
// warm-ups first, the L2 flushed before each repetition, the median with p10
// and p90 of the repetitions; a time the events cannot give is refused.
// The backward's ProgramBench (measure/program_bench.hpp): verify gives the
// worst written buffer's comparison in brief, time the whole program with
// its parts from events between the steps -- "support" (align and clears)
// and each GEMM role by name (a graph replay is refused).
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "device/device.hpp"
#include "device/device_buffer.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "layer/execute.hpp"
#include "layer/program.hpp"
#include "measure/program_bench.hpp"
#include "measure/timing.hpp"
#include "measure/workload/backward_reference.hpp"
#include "measure/workload/compare.hpp"

namespace ft {

// A verification of the backward: each written buffer's comparison.
struct BackwardCheck {
  std::vector<std::pair<Buf, Comparison>> buffers;  // in the roles' order of writes
  std::size_t unrouted_written = 0;  // d_gate_up elements of unrouted pairs that lost their poison
  bool passed() const;
  const Comparison& worst() const;  // a failed one first, else the largest relative L2
  std::string summary() const;      // "dw1: rel L2 ..." of the worst, or what broke
};

// The reference gradient of a buffer a backward role writes (dx, dw1, dw2,
// d_weights; d_gate_up otherwise).
const std::vector<float>& reference_gradient(Buf b, const MoeGradients<float>& ref);

// d_gate_up [T*k, 2I] checked as the backward's tests check it: the routed
// pairs' rows (ids in [0, E)) against the reference with the 16-bit bounds;
// `unrouted_written` counts the other rows' elements that lost their poison
// (0xffff, a 16-bit NaN).
struct RoutedCheck {
  Comparison routed;
  std::size_t unrouted_written = 0;
};
RoutedCheck check_d_gate_up(std::span<const std::uint16_t> got, const std::vector<float>& ref,
                            std::span<const std::int32_t> topk_ids, const Problem& problem);

// The weight gradients' type a run asks for: fp32 (KGroupedArgs::c, the C
// ABI's dw1/dw2) or the weights' 16-bit type (KGroupedArgs::c16, dw1_16/
// dw2_16: what flytune.jax and flytune.torch ask for, and the type torch's and
// JAX's own backward give). The same kernel either way, a runtime choice of its
// epilogue; a search verifies and times the 16-bit form, check-export checks both.
enum class WeightGrads : std::uint8_t { f32, half };

class BackwardBench final : public ProgramBench {
 public:
  // Loads the support unit (its align kernels) of a 16-bit problem.
  static Result<std::unique_ptr<BackwardBench>> create(Device& dev, const Problem& problem, const Target& target,
                                                       std::span<const std::byte> support_code_object);
  ~BackwardBench() override;

  // Fresh inputs for `tokens`; their reference gradients are made by the first check().
  Status set_inputs(int tokens, std::uint64_t seed, int empty_experts) override;

  // `p.kernels`: the kernels of the recipe's roles (dgrad2 .. wgrad1); the bench adds its align.
  // Every buffer the roles write, checked.
  Result<BackwardCheck> check(const LoadedProgram& p);
  // ProgramBench: check()'s worst comparison in brief; the program timed as a whole.
  Result<ProgramCheck> verify(const LoadedProgram& p) override;
  Result<ProgramTiming> time(const LoadedProgram& p, const TimingOptions& opt) override;

  // The weight gradients' type of the runs that follow (default: half).
  void set_weight_grads(WeightGrads w) { weight_grads_ = w; }
  WeightGrads weight_grads() const { return weight_grads_; }

  int tokens() const;
  bool has_reference() const;  // whether the current inputs' CPU backward has been computed (by a check)

  struct State;  // the current inputs, their reference and the saved-tensor kernel (backward_bench.cpp)

 private:
  BackwardBench(Device& dev, const Problem& p, const Target& t);
  void ensure_reference();  // the fp32 CPU backward of the current inputs, once
  std::unique_ptr<State> state_;
  L2Flush flush_;
  WeightGrads weight_grads_ = WeightGrads::half;
};

}  // namespace ft
