#pragma once
// The bench of an operation (layer/operation.hpp): one interface for
// verifying and timing any operation's program on a Device, so the measuring
// service (worker/worker_service.hpp) holds one bench whichever operation it
// opened and asks it the same questions.
//
// A bench owns a problem's inputs on one Device and the modules it loaded:
// the support unit and the role kernels' code objects. It verifies a program
// -- a recipe of the operation's roles with a loaded kernel per role --
// against the operation's reference (ProgramCheck: the comparison in words),
// and times it (ProgramTiming: the whole, and the parts it times alone).
// LayerBench is the forward layer's (a recipe of one stage is that stage
// alone), BackwardBench the backward's; open_program_bench makes the one of
// an operation by its row of the bench table (program_bench.cpp).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "device/device.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "layer/execute.hpp"
#include "layer/operation.hpp"
#include "layer/program.hpp"
#include "measure/timing.hpp"
#include "measure/workload/compare.hpp"

namespace ft {

// A recipe of an operation's roles (LayerRecipe::stages or ::grad, for the
// bench's target and problem) with the kernel loaded for each, by launch role.
struct LoadedProgram {
  LayerRecipe recipe;
  RoleKernels kernels;
};

// A verification in brief: passed, the (worst) comparison's relative L2 and
// largest difference, and the comparison in words ("rel L2 1.2e-03 (bound ...").
struct ProgramCheck {
  bool passed = false;
  double rel_l2 = 0, max_abs = 0;
  std::string summary;
};
// A comparison of rows of `row_length` elements in brief.
ProgramCheck program_check(const Comparison& c, int row_length);

class ProgramBench {
 public:
  virtual ~ProgramBench();  // unloads every module it loaded
  ProgramBench(const ProgramBench&) = delete;
  ProgramBench& operator=(const ProgramBench&) = delete;

  const op::Operation& operation() const { return operation_; }
  const Problem& problem() const { return problem_; }
  const Target& target() const { return target_; }
  Device& device() { return dev_; }

  // Loads a role kernel's code object, allowing `lds_bytes` of dynamic shared
  // memory (0: the default); the handle stays valid for the bench's life.
  Result<FunctionHandle> load(std::span<const std::byte> code_object, const std::string& entry, int lds_bytes = 0);

  // Fresh seeded inputs for `tokens` tokens, routed with `empty_experts`
  // experts left without tokens (workload/workload.hpp, make_routing).
  virtual Status set_inputs(int tokens, std::uint64_t seed, int empty_experts) = 0;
  // The program's outputs against the operation's reference on the current inputs.
  virtual Result<ProgramCheck> verify(const LoadedProgram& p) = 0;
  // The program timed as a whole (events around it), with the parts the bench times alone.
  virtual Result<ProgramTiming> time(const LoadedProgram& p, const TimingOptions& opt) = 0;

  // Launches the support unit's fill kernel through an invalid device address
  // and waits: the device error a broken kernel would raise (crash-isolation tests).
  Status inject_fault();

 protected:
  ProgramBench(const op::Operation& o, Device& dev, const Problem& p, const Target& t);
  // Loads the support unit; its fill kernel, where it has one, serves inject_fault.
  // Every support kernel of the operation that a step launches
  // (layer/support_kernels.def, use step) goes into support_ by its role: the
  // fp8 rows for an e4m3 problem only, the others always (Errc::not_found
  // when the unit lacks one).
  Result<ModuleHandle> load_support(std::span<const std::byte> support);
  // The support kernels with the program's role kernels over them: what a
  // program of this bench binds (layer/execute.hpp, bind).
  RoleKernels with_support(const RoleKernels& roles) const;
  // Errc::invalid_input for a recipe of another target or problem than the bench's.
  Status check_recipe(const LayerRecipe& r) const;

  const op::Operation& operation_;
  Device& dev_;
  Problem problem_;
  const Target& target_;
  std::vector<ModuleHandle> modules_;
  FunctionHandle fill_{};
  RoleKernels support_;  // the support unit's step kernels (load_support)
};

// The bench of operation `o` for `problem` on `dev`: its support unit loaded,
// buffers for up to `max_tokens` tokens where the operation's bench sizes
// them up front. Errc::invalid_input for an operation without a bench.
Result<std::unique_ptr<ProgramBench>> open_program_bench(const op::Operation& o, Device& dev, const Problem& problem,
                                                         const Target& target, std::span<const std::byte> support,
                                                         int max_tokens);

}  // namespace ft
