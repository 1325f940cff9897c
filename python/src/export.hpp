#pragma once
// The Python package's view of one export folder, shared by the nanobind module
// (flytune._core) and the JAX FFI handlers: one libflytune_runtime handle per
// GPU it runs on, the plans per (problem, T) (an LRU of kPlanCachePlans), the workspace carved from one
// caller-owned buffer, and a process-wide registry so that an XLA custom call,
// which can only carry strings and numbers, finds the export by its key.
//
// Everything here goes through the C API of runtime/include/flytune_runtime.h;
// a failing call becomes ft::py::Error carrying the runtime's status and its
// message (ft_runtime_last_error), which the bindings turn into a Python
// exception or an ffi::Error.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/include/flytune_runtime.h"

namespace ft::py {

// The plans an Export keeps per device: a serving loop calls with a new token
// count T on most steps, and a plan is per T, so the least recently used is
// freed past this many (docs/PYTHON.md, "Plans"); 256 covers every T of a
// prefill/decode mix of a few batch sizes and a few hundred prompt lengths.
inline constexpr int kPlanCachePlans = 256;

// The device selector of the CPU emulator: Export::open(dir, kEmulate) runs an
// export of `flytune search --emulate` (its host libraries) on this CPU.
inline constexpr const char* kEmulate = "emulate";

// A failure with the runtime's status (ft_status) and message.
class Error : public std::runtime_error {
 public:
  Error(int status, const std::string& message) : std::runtime_error(message), status_(status) {}
  int status() const { return status_; }

 private:
  int status_;
};

// The plan's workspace as the runtime carves it (ft_plan_workspace_bytes,
// ft_plan_workspace_buffer): the JAX wrapper sizes its scratch result and the
// torch op its allocation with `total`, and both hand the one buffer to the
// runtime (ft_layer_buffers::workspace), which places each buffer in it.
struct WorkspaceBuffer {
  std::string name;
  std::size_t offset = 0, bytes = 0;
};
struct WorkspaceLayout {
  std::vector<WorkspaceBuffer> buffers;
  std::size_t total = 0;
};

// A scale tensor the caller hands an fp8 layer: its ft_layer_buffers name
// ("x_scale", "w1_scales", "w2_scales", "inter_scale") and row-major shape (the header's rule
// for the plan's mode, its element count checked against ft_plan_scale_count).
struct ScaleTensor {
  std::string name;
  std::vector<long long> shape;
};

struct ProblemInfo {
  std::string key;
  int experts = 0, hidden = 0, inter = 0, topk = 0;
  std::string dtype;  // the weights' format (ft_problem_shape): "bf16", "f16", "e4m3" or "e4m3fnuz"
  int element_bytes = 2;  // of a weight element: 2, or 1 (fp8 codes; x and y are bf16 there)
  std::string scales = "none";  // ft_plan_scales by name: "none", "per-tensor", "per-token", "block128", "static"
  std::vector<ScaleTensor> scale_tensors;  // those the layer reads (none in 16-bit layers)
  std::vector<int> buckets;
  bool has_backward = false;  // ft_plan_has_backward: the export holds backward buckets of this problem
};

// The backward of a plan (ft_plan_has_backward): where it is not available, the
// runtime's reason. A backward launch takes one caller-owned scratch buffer,
// carved here: the saved tensors the forward does not keep (saved_gate_up
// [T*k, 2I], saved_inter [T*k, I], 16-bit, recomputed by
// ft_plan_backward_saved) and the backward program's own workspace
// (ft_plan_backward_workspace_bytes), each at a multiple of FT_WORKSPACE_ALIGN.
struct BackwardInfo {
  bool available = false;
  int bucket = 0;   // ft_plan_backward_bucket
  // ft_plan_backward_takes_dw16: its kernels write dW1 / dW2 in the weights' type (GradCall's dw1_16,
  // dw2_16); false where they predate that (the caller passes fp32 dw1, dw2 and casts).
  bool dw16 = false;
  std::string why;  // the runtime's message where not available
  WorkspaceLayout scratch;
};

// What a plan for (problem, T) needs: the bucket it runs, the weight copies
// each stage reads, the workspace.
struct PlanInfo {
  std::string problem;
  int tokens = 0, bucket = 0;
  bool w1_shuffled = false, w2_shuffled = false, w1_tiled = false, w2_tiled = false;
  // The plain w1 / w2 (as the caller gives them): read where that stage reads neither copy (a stage reads its
  // weights in one layout); a caller whose plans never read one may pass it empty (null) and free it.
  bool w1 = false, w2 = false;
  WorkspaceLayout workspace;
  int element_bytes = 2;
  std::string dtype, scales = "none";
  std::vector<ScaleTensor> scale_tensors;
  // ft_plan_coverage as "tuned", "above_largest" or "missing_bucket", and its note ("" when tuned).
  std::string coverage = "tuned", coverage_note;
  BackwardInfo backward;
};

// Device pointers of one layer call (0: absent). Shapes are the caller's to
// check against the plan (the wrappers do, before tracing a call).
struct LayerCall {
  std::uintptr_t x = 0, topk_ids = 0, topk_weights = 0, w1 = 0, w2 = 0;
  std::uintptr_t w1_shuffled = 0, w2_shuffled = 0, w1_tiled = 0, w2_tiled = 0;
  std::uintptr_t workspace = 0;
  std::size_t workspace_bytes = 0;
  std::uintptr_t y = 0;
  std::uintptr_t x_scale = 0, w1_scales = 0, w2_scales = 0;  // fp32 scales of fp8 layers (0 in 16-bit ones)
  std::uintptr_t inter_scale = 0;                             // static fp8 layers: the intermediate's [1]
};

// Device pointers of one backward call (ft_layer_grads): the forward's inputs,
// dL/dy, the gradients -- dx and d_topk_weights in fp32, dW1 and dW2 either in
// the weights' 16-bit type (dw1_16, dw2_16; BackwardInfo::dw16) or in fp32
// (dw1, dw2), 0 for the other -- and the scratch of BackwardInfo::scratch.
struct GradCall {
  std::uintptr_t x = 0, topk_ids = 0, topk_weights = 0, w1 = 0, w2 = 0, dy = 0;
  std::uintptr_t dx = 0, dw1 = 0, dw2 = 0, d_topk_weights = 0;
  std::uintptr_t scratch = 0;
  std::size_t scratch_bytes = 0;
  std::uintptr_t dw1_16 = 0, dw2_16 = 0;
};

class Export {
 public:
  // Opens `dir` through the runtime on `device`: "" the runtime's default
  // (FLYTUNE_DEVICE, else the first GPU), "cuda:N" / "hip:N", or "none": every
  // check the runtime makes without a GPU (manifest, files, hashes), for
  // listing and planning on a machine without one; launching then fails.
  static std::shared_ptr<Export> open(const std::string& dir, const std::string& device);
  ~Export();
  Export(const Export&) = delete;
  Export& operator=(const Export&) = delete;

  const std::string& key() const { return key_; }  // the registry key
  const std::string& dir() const { return dir_; }
  const std::string& target() const { return target_; }
  // The selector of the device opened first ("cuda:0", "hip:0", "none").
  const std::string& device() const { return device_; }
  const std::vector<ProblemInfo>& problems() const { return problems_; }

  // The export's problem for these shapes and scale mode ("none" or "" for
  // 16-bit layers; routing is a tuning-time distribution, not part of the
  // call): its key, or Error with the runtime's own answer for the key these
  // shapes would have (FT_ERR_NOT_FOUND, naming the problems the export has).
  std::string find_problem(int experts, int hidden, int inter, int topk, const std::string& dtype, int tokens,
                           const std::string& scales = "none");
  PlanInfo plan_info(const std::string& problem, int tokens);
  // The weights any bucket of `problem` reads, by name: "w1", "w2" (plain), "w1_shuffled", ... "w2_tiled".
  std::vector<std::string> weights_read(const std::string& problem);
  // Those of them that are arranged copies ("w1_shuffled", ...): what prepare_weights makes.
  std::vector<std::string> weight_copies(const std::string& problem);

  // Opens the export on another device ("cuda:1"); a no-op when open there.
  void open_on(const std::string& selector);
  bool is_open_on(const std::string& selector);
  // The plans cached on that device (at most kPlanCachePlans: an LRU by (problem, T)).
  int cached_plans(const std::string& selector);

  // Enqueues the layer for (problem, T) on `stream` of the device `selector`
  // names: the plan's steps (ft_plan_launch), workspace carved from
  // call.workspace. No allocation, no synchronisation.
  void launch(const std::string& selector, const std::string& problem, int tokens, const LayerCall& call, void* stream);
  // Enqueues the backward for (problem, T) on `stream`: the saved tensors
  // recomputed into the scratch (ft_plan_backward_saved), then the backward
  // program (ft_plan_backward_launch), its workspace carved from the scratch
  // after them. No allocation, no synchronisation. Error FT_ERR_NOT_FOUND with
  // the runtime's message where the export has no backward of the problem.
  void launch_backward(const std::string& selector, const std::string& problem, int tokens, const GradCall& call,
                       void* stream);
  // ft_runtime_arrange_weights_of on that device (element_bytes 2, or 1 for fp8 codes).
  void arrange(const std::string& selector, std::uintptr_t src, std::uintptr_t dst, int rows, int cols, int layout,
               void* stream, int element_bytes = 2);

 private:
  struct Runtime;  // one ft_runtime and its plans
  Export() = default;
  Runtime& runtime_for(const std::string& selector);
  ft_plan* plan(Runtime& r, const std::string& problem, int tokens);

  std::string dir_, key_, target_, device_;
  std::vector<ProblemInfo> problems_;
  std::mutex mutex_;  // guards runtimes_
  std::map<std::string, std::unique_ptr<Runtime>> runtimes_;
};

// ft_fp8_ocp_to_fnuz on host memory: OCP e4m3 codes and their scales converted
// in place for gfx942's fnuz; returns the count of OCP NaNs (now fnuz NaN).
std::size_t fp8_ocp_to_fnuz(std::uintptr_t codes, std::size_t count, std::uintptr_t scales, std::size_t scale_count);

// The registry: exports by key, held weakly (an export lives as long as its
// Python object); a custom call of a closed export gets Error.
std::shared_ptr<Export> find_export(const std::string& key);

}  // namespace ft::py
