#pragma once
// The runtime behind the C API (runtime/include/flytune_runtime.h), in C++ for
// the library's own tests and for `flytune check-export`: the manifest as
// structs, the checks that refuse an export, and the launch of a planned layer.
//
// A bucket of the manifest records its stage variants (the layer program's
// recipe) and the program's steps at the bucket's token count. At open the
// runtime builds the program from the recipe with the one layer program
// library (layer/program.hpp) and refuses a manifest whose recorded steps
// differ; at ft_runtime_select it builds the program for the caller's T and
// at launch it executes those steps (layer/execute.hpp). No launch rule lives
// here.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "generator/problem.hpp"
#include "generator/variant.hpp"
#include "layer/execute.hpp"
#include "layer/operation.hpp"
#include "device/device.hpp"
#include "manifest/manifest.hpp"

struct ft_runtime;  // the C API handles (flytune_runtime.h)
struct ft_plan;

namespace ft::rt {

// Larger files are refused before they are read (a manifest of a few thousand
// buckets is a few MiB; the largest code objects are a few MiB).
inline constexpr std::uintmax_t kMaxManifestBytes = 64u << 20;
inline constexpr std::uintmax_t kMaxCodeObjectBytes = 256u << 20;

// A bucket and a support unit as the manifest library decodes them
// (manifest/manifest.hpp), with the functions loading binds.
struct Bucket : manifest::Bucket {
  RoleKernels kernels;  // after loading
  bool atomic() const {
    const Variant* s2 = recipe.stage(StageRole::stage2);
    return s2 && s2->contract().output == Reduce::atomic;
  }
};

struct SupportUnit : manifest::SupportUnit {
  std::array<FunctionHandle, kSupportCount> functions{};  // by Support; null where the unit lacks the entry
  FunctionHandle fn(Support s) const { return functions[std::size_t(s)]; }
};

struct ProblemEntry {
  std::string key;
  Problem problem;
  std::vector<Bucket> buckets;  // ascending tokens
  // Buckets the search left without a layer winner (manifest missing_buckets,
  // exported with --allow-missing), ascending; empty in older manifests.
  std::vector<int> missing_buckets;
  // The backward's buckets (manifest ProblemEntry::backward), ascending; empty without one.
  std::vector<Bucket> backward;
};

struct Manifest {
  std::string target;
  const Target* target_info = nullptr;
  std::string format;  // "cubin", "hsaco" or "so" (host libraries for the CPU emulator: a search --emulate)
  std::vector<ProblemEntry> problems;
  std::vector<SupportUnit> supports;
  std::vector<std::string> files;  // every code object named, once
};

// Decodes manifest.json of `dir` (manifest::decode: its schema version, and
// each bucket's recorded steps against the layer program) and checks that
// every file it names lies inside `dir`.
// Errc::invalid_input: malformed, unsupported or disagreeing; Errc::io: a
// file outside, not a regular file, or too large.
Result<Manifest> read_manifest(const std::string& dir);
// Reads every code object and checks that its bytes hash (XXH3-128) to its
// name. Errc::io: missing or unreadable; Errc::verify: a mismatch.
Result<std::map<std::string, std::vector<std::byte>>> read_code_objects(const std::string& dir, const Manifest& m);
// Errc::no_device when the device's target is not the export's.
Status check_target(const Manifest& m, const DeviceInfo& device);

int select_bucket(const ProblemEntry& p, int tokens);  // index into p.buckets (manifest::select_bucket)

// How a plan's T is served (the C API's ft_coverage): by the bucket meant for
// it (the smallest tuned bucket >= T); above the largest tuned or missing
// bucket, by the largest; or by another bucket because the one meant for it
// has no layer (a missing bucket). `note` says so in one line ("" when tuned).
enum class Coverage { tuned = 0, above_largest = 1, missing_bucket = 2 };
struct CoverageNote {
  Coverage coverage = Coverage::tuned;
  std::string note;
};
CoverageNote coverage_of(const ProblemEntry& p, int tokens);

class Runtime;

// One operation of a plan (layer/operation.hpp: the forward layer, its
// backward): the bucket of the operation's buckets for T (the bucket rule),
// the operation's program built for T from that bucket's recipe, bound to the
// loaded kernels. Every operation is planned and launched by the same code
// (Runtime::plan_operation, run); only the caller's buffers differ.
struct OperationPlan {
  const Bucket* bucket = nullptr;
  LayerProgram program;
  std::vector<FunctionHandle> functions;  // one per step
};
// The backward of a plan (docs/EXPORT.md, "The backward").
using BackwardPlan = OperationPlan;
// Whether its wgrad kernels write dW1 / dW2 in 16 bits when given dw1_16 / dw2_16 (they read
// KGroupedArgs::c16: the bucket's kgrouped_args_bytes); a launch with them is refused otherwise.
bool takes_dw16(const BackwardPlan& bw);

// A layer for one (problem, T): the forward's plan (bucket, program,
// functions) and, where the export has one, the backward's. Launching runs
// its steps; nothing is derived or allocated then.
struct Plan : OperationPlan {
  const ProblemEntry* problem = nullptr;
  const SupportUnit* support = nullptr;
  int tokens = 0;
  CoverageNote coverage;
  Runtime* runtime = nullptr;
  std::optional<BackwardPlan> backward;   // when the export has a backward for the problem
};

// The buffers of a forward launch (the C API's ft_layer_buffers). A member
// named as a row of layer/buffers.def is that buffer's pointer (caller_table).
struct LayerBuffers {
  DevicePtr x = 0, topk_ids = 0, topk_weights = 0, w1 = 0, w2 = 0, w1_shuffled = 0, w2_shuffled = 0;
  DevicePtr inter = 0, y_acc = 0, sorted_ids = 0, block_experts = 0, padded_rows = 0, y = 0;
  DevicePtr w1_tiled = 0, w2_tiled = 0;  // appended, as in ft_layer_buffers
  DevicePtr bad_ids = 0;                 // appended: optional [1] int32
  // appended: one workspace for every workspace buffer of the plan (the layer
  // program's workspace_placement); when set, inter .. padded_rows above are not read.
  DevicePtr workspace = 0;
  std::size_t workspace_bytes = 0;
  DevicePtr x_scale = 0, w1_scales = 0, w2_scales = 0;  // appended: fp8 layers' scales
  DevicePtr inter_scale = 0;                            // appended: fp8 static: the intermediate's scale
};
// The table of a plan's launch: the caller's pointers, the workspace buffers
// carved from b.workspace when given (Errc::usage when it is too small).
Result<BufferTable> buffer_table(const LayerProgram& program, const LayerBuffers& b);
// The program's workspace buffers placed in one workspace of `bytes` (its
// workspace_placement); Errc::usage when it is too small: "<what> holds N
// bytes, <needer> M (<sizes_from>)", sizes_from the call that gives the size.
Status carve_workspace(BufferTable& t, const LayerProgram& program, DevicePtr workspace, std::size_t bytes,
                       const std::string& what, const std::string& needer, const std::string& sizes_from);

// The buffers of a backward launch (the C API's ft_layer_grads): what it
// reads of the forward -- X, the routing, the plain weights and the saved
// tensors --, dY, its outputs, and one workspace (the backward program's
// workspace_placement: d_gate_up and the align's rows). Members named as
// LayerBuffers' are.
struct GradBuffers {
  DevicePtr x = 0, topk_ids = 0, topk_weights = 0, w1 = 0, w2 = 0;
  DevicePtr dy = 0, saved_gate_up = 0, saved_inter = 0;
  DevicePtr dx = 0, dw1 = 0, dw2 = 0, d_weights = 0;  // d_weights: ft_layer_grads::d_topk_weights
  DevicePtr workspace = 0;
  std::size_t workspace_bytes = 0;
  DevicePtr bad_ids = 0;  // optional [1] int32
  DevicePtr dw1_16 = 0, dw2_16 = 0;  // optional: dW1, dW2 in the weights' 16-bit type, written instead of dw1, dw2
};

// The caller's pointers of a launch (LayerBuffers, GradBuffers) as a table:
// each member of `b` named as a row of layer/buffers.def, into that row. A
// buffer the caller passes is a member of its name, and no line here; the
// workspace rows are carved from b.workspace by carve_workspace.
template <class Buffers>
BufferTable caller_table(const Buffers& b) {
  BufferTable t{};
#define FT_BUFFER(name, member, pointee, place, meaning, size) \
  if constexpr (requires(const Buffers& v) { v.name; }) at(t, Buf::name) = b.name;
#include "layer/buffers.def"
#undef FT_BUFFER
  return t;
}
// How many rows of layer/buffers.def both structs name as a member.
template <class A, class B = A>
constexpr std::size_t rows_named_in() {
  std::size_t n = 0;
#define FT_BUFFER(name, member, pointee, place, meaning, size) \
  if constexpr (requires(const A& a, const B& b) { a.name; b.name; }) ++n;
#include "layer/buffers.def"
#undef FT_BUFFER
  return n;
}
// Every pointer but the workspace is bound (a member whose name is no row of
// layer/buffers.def would be read by nothing): all members are 8 bytes, and
// workspace and workspace_bytes are the two not bound.
static_assert(sizeof(DevicePtr) == sizeof(std::size_t));
static_assert(rows_named_in<LayerBuffers>() == sizeof(LayerBuffers) / sizeof(DevicePtr) - 2,
              "a member of LayerBuffers is named as no row of layer/buffers.def");
static_assert(rows_named_in<GradBuffers>() == sizeof(GradBuffers) / sizeof(DevicePtr) - 2,
              "a member of GradBuffers is named as no row of layer/buffers.def");

struct WorkspaceSizes {
  std::size_t inter = 0, y_acc = 0, sorted_ids = 0, block_experts = 0, padded_rows = 0;
};

class Runtime {
 public:
  using DeviceOpener = std::function<Result<std::unique_ptr<Device>>()>;
  // The code objects by file name; the default reads the folder's files and
  // checks their hashes (read_code_objects). check-export --emulate passes
  // one that builds each unit for the CPU emulator from the manifest's variants.
  using ObjectSource = std::function<Result<std::map<std::string, std::vector<std::byte>>>(const Manifest&)>;
  // Every check that needs no GPU runs before `open_device` is called; the
  // device error keeps its code, a target mismatch is Errc::no_device.
  static Result<std::unique_ptr<Runtime>> open(const std::string& dir, const DeviceOpener& open_device,
                                               const ObjectSource& objects = {});
  // Every check of `open` that needs no GPU (manifest, files, hashes), and no
  // device: problems, buckets and plans (select, workspace) answer as after
  // `open`; launching and every device call fail with Errc::device. For
  // programs that plan on a machine without a GPU (the Python package's
  // flytune.load(dir, device="none"), its CI tests).
  static Result<std::unique_ptr<Runtime>> open_without_device(const std::string& dir);
  bool has_device() const { return loaded_; }
  ~Runtime();

  Result<Plan> select(const std::string& problem_key, int tokens);
  WorkspaceSizes workspace(const Plan& plan) const;
  WorkspacePlacement workspace_placement(const Plan& plan) const { return ft::workspace_placement(plan.program); }
  // Asynchronous: the plan's steps on `stream` (a memset for atomic
  // reductions and four launches).
  Status launch(const Plan& plan, const LayerBuffers& b, StreamHandle stream);
  // src [rows, cols] row-major -> dst in `layout` (shuffled or tiled), by the
  // support unit's shuffle kernel (elements of `element_bytes`, 2 or 1:
  // arrange_launch); Errc::usage for sizes the layout cannot hold.
  Status arrange_weights(DevicePtr src, DevicePtr dst, int rows, int cols, WeightLayout layout, StreamHandle stream,
                         int element_bytes = 2);
  // `kind`: FillArgs::elem (0 bf16, 1 f16, 2 e4m3 codes, 3 fp32 scales); -1:
  // the export's 16-bit type. Codes need an e4m3 support unit (its format).
  Status fill_random(DevicePtr dst, std::size_t count, std::uint64_t seed, float scale, int kind = -1, int group = 0);
  // The support unit's reference kernels for the plan's problem and routed-weight
  // placement, on `tokens` tokens of the buffers (0: the plan's T).
  // fp8 plans with `bf16_layer`: the bf16 layer on the same dequantised
  // weights instead (kFlagUnquantised), the sanity reference of check-export.
  Status reference(const Plan& plan, const LayerBuffers& b, DevicePtr y_ref, StreamHandle stream, int tokens = 0,
                   bool bf16_layer = false);
  // Static-scale fp8 plans: the static intermediate scale of these inputs (x,
  // the routing, w1, x_scale, w1_scales; `tokens` tokens, 0: the plan's T), as
  // the search calibrates its workloads' (layer/calibrate.hpp, from the
  // reference's fp32 intermediate before the routed weight): check-export's
  // calibration pass. A server passes its checkpoint's scale instead.
  Result<float> calibrate_inter_scale(const Plan& plan, const LayerBuffers& b, StreamHandle stream, int tokens = 0);

  // The backward (runtime/src/backward.cpp). Errc::not_found for a plan whose
  // export has no backward of its problem; Errc::usage for a null buffer the
  // program reads (all named at once) or a workspace too small.
  // The workspace bytes of the plan's backward program at `tokens` (its
  // bucket's recipe; 1..kMaxTokens; monotonic in T).
  Result<std::uint64_t> backward_workspace_bytes(const Plan& plan, int tokens) const;
  // Asynchronous: the backward's steps on `stream` at the plan's T.
  Status launch_backward(const Plan& plan, const GradBuffers& b, StreamHandle stream);
  // Asynchronous: the forward's saved tensors (saved_gate_up, saved_inter)
  // recomputed from x, topk_ids and w1 by the support unit's forward_saved.
  Status backward_saved(const Plan& plan, const GradBuffers& b, StreamHandle stream);

  Device& device() { return *device_; }
  const Manifest& manifest() const { return manifest_; }

 private:
  Runtime() = default;
  Status load(const std::map<std::string, std::vector<std::byte>>& objects);
  Status reference_fp8(const Plan& plan, const LayerBuffers& b, MoeArgs& a, StreamHandle stream, bool bf16_layer);
  Status launch_support(FunctionHandle f, const LaunchShape& s, const void* args, std::size_t size, StreamHandle stream);
  // A function of a loaded code object: (file, symbol).
  using FunctionOf = std::function<Result<FunctionHandle>(const std::string&, const std::string&)>;
  // Binds a bucket of `op` to its kernels: the support unit's for the
  // operation's support steps, the bucket's code objects for its roles'
  // kernels that the bucket's program launches.
  Status load_bucket(const op::Operation& op, Bucket& b, const SupportUnit& u, const FunctionOf& function);
  // The plan of `op` at `tokens` over its buckets (ascending; not empty):
  // Errc::usage "<what>: why" where the program cannot be built.
  Result<OperationPlan> plan_operation(const op::Operation& op, const std::vector<Bucket>& buckets, int tokens,
                                       const std::string& what, const std::string& key) const;
  // Its steps on `stream` over the caller's buffers (checked first).
  Status run(const OperationPlan& plan, const BufferTable& table, StreamHandle stream);

  Manifest manifest_;
  std::unique_ptr<Device> device_;
  std::vector<ModuleHandle> modules_;
  bool loaded_ = false;  // a device was opened and the code objects loaded on it
};

// The C API handle's runtime, for C++ code (tests) that needs its Device.
Runtime* runtime_of(struct ::ft_runtime* handle);
// The plan behind a C API plan handle (check-export's sampled reference).
const Plan* plan_of(const struct ::ft_plan* handle);
// A C API handle over a runtime opened in C++ (tests and check-export with
// their own Device); ft_runtime_close frees it.
struct ::ft_runtime* adopt_runtime(std::unique_ptr<Runtime> runtime);

}  // namespace ft::rt
