#pragma once
// The runtime behind the C API (runtime/include/flytune_runtime.h), in C++ for
// the library's own tests: the manifest as structs, the checks that refuse an
// export, and the launch of a planned layer through ft::Device.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "generator/error.hpp"
#include "generator/variant.hpp"
#include "tuner/device/device.hpp"

struct ft_runtime;  // the C API handle (flytune_runtime.h)

namespace ft::rt {

inline constexpr int kSupportedSchema = 1;

struct Step {
  enum class Op { memset_y_acc, launch };
  enum class Grid { single, stage, elementwise };
  Op op = Op::launch;
  std::string name;         // "clear_y_acc", "align", "stage1", "stage2", "reduce"
  std::string symbol;
  std::string code_object;  // file name in the export folder
  unsigned block = 1;
  int dynamic_shared = 0;
  Grid grid = Grid::single;
  int rows_per_block = 0;   // stage grids
  bool n_is_inter = false;
  int cols_per_block = 0;
  int grid_z = 1;
  int elements_per_thread = 8;  // elementwise grids
  WeightLayoutKind weight_layout = WeightLayoutKind::plain;  // stages: the layout of the weights they read
  FunctionHandle function;  // after loading
};

struct Bucket {
  int tokens = 0;
  int align_block = 0;
  bool atomic = true;
  bool weight_in_stage1 = false;
  WeightLayoutKind w1_layout = WeightLayoutKind::plain, w2_layout = WeightLayoutKind::plain;
  std::vector<Step> steps;
};

struct SupportUnit {
  std::string dtype;
  std::string code_object;
  std::string shuffle, reference1, reference2, fill;  // symbols
  FunctionHandle shuffle_fn, reference1_fn, reference2_fn, fill_fn;
};

struct ProblemEntry {
  std::string key;
  int experts = 0, hidden = 0, inter = 0, topk = 0;
  std::string dtype;
  std::vector<Bucket> buckets;  // ascending tokens
};

struct Manifest {
  std::string target;
  std::string format;  // "cubin" or "hsaco"
  std::vector<ProblemEntry> problems;
  std::vector<SupportUnit> supports;
  std::vector<std::string> files;  // every code object named, once
};

// Parses manifest.json of `dir` and checks that every file it names lies inside
// `dir`. Errc::invalid_input: malformed or unsupported; Errc::io: a file outside.
Result<Manifest> read_manifest(const std::string& dir);
// Reads every code object and checks that its bytes hash (XXH3-128) to its
// name. Errc::io: missing or unreadable; Errc::verify: a mismatch.
Result<std::map<std::string, std::vector<std::byte>>> read_code_objects(const std::string& dir, const Manifest& m);
// Errc::no_device when the device's target is not the export's.
Status check_target(const Manifest& m, const DeviceInfo& device);

long long max_padded_rows(const ProblemEntry& p, int tokens, int align_block);
int select_bucket(const ProblemEntry& p, int tokens);  // index into p.buckets

struct Plan {
  const ProblemEntry* problem = nullptr;
  const Bucket* bucket = nullptr;
  const SupportUnit* support = nullptr;
  int tokens = 0;
  class Runtime* runtime = nullptr;
};

struct LayerBuffers {
  DevicePtr x = 0, topk_ids = 0, topk_weights = 0, w1 = 0, w2 = 0, w1_shuffled = 0, w2_shuffled = 0;
  DevicePtr inter = 0, y_acc = 0, sorted_ids = 0, block_experts = 0, padded_rows = 0, y = 0;
  DevicePtr w1_tiled = 0, w2_tiled = 0;  // appended, as in ft_layer_buffers
};

struct WorkspaceSizes {
  std::size_t inter = 0, y_acc = 0, sorted_ids = 0, block_experts = 0, padded_rows = 0;
};

class Runtime {
 public:
  using DeviceOpener = std::function<Result<std::unique_ptr<Device>>()>;
  // Every check that needs no GPU runs before `open_device` is called; the
  // device error keeps its code, a target mismatch is Errc::no_device.
  static Result<std::unique_ptr<Runtime>> open(const std::string& dir, const DeviceOpener& open_device);
  ~Runtime();

  Result<Plan> select(const std::string& problem_key, int tokens);
  WorkspaceSizes workspace(const Plan& plan) const;
  // Asynchronous: one memset (atomic reduction) and four launches on `stream`.
  Status launch(const Plan& plan, const LayerBuffers& b, StreamHandle stream);
  Status shuffle_weights(DevicePtr src, DevicePtr dst, int rows, int cols, StreamHandle stream);
  // src [rows, cols] row-major -> dst in `layout` (shuffled or tiled), by the
  // support unit's shuffle kernel; Errc::usage for sizes the layout cannot hold.
  Status arrange_weights(DevicePtr src, DevicePtr dst, int rows, int cols, WeightLayoutKind layout, StreamHandle stream);
  Status fill_random(DevicePtr dst, std::size_t count, std::uint64_t seed, float scale);
  Status reference(const Plan& plan, const LayerBuffers& b, DevicePtr y_ref, StreamHandle stream);

  Device& device() { return *device_; }
  const Manifest& manifest() const { return manifest_; }

 private:
  Runtime() = default;
  Status load(const std::map<std::string, std::vector<std::byte>>& objects);

  Manifest manifest_;
  std::unique_ptr<Device> device_;
  std::vector<ModuleHandle> modules_;
};

// The C API handle's runtime, for C++ code (tests) that needs its Device.
Runtime* runtime_of(struct ::ft_runtime* handle);
// A C API handle over a runtime opened in C++ (tests with their own Device);
// ft_runtime_close frees it.
struct ::ft_runtime* adopt_runtime(std::unique_ptr<Runtime> runtime);

}  // namespace ft::rt
