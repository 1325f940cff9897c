#pragma once
// manifest.json, the description of an export (docs/EXPORT.md), in one typed
// home: every field as a member, the one encoding and the one decoding, the
// schema version and the rule that picks a bucket for a token count. The
// export fills a Manifest and encodes it (export/export.cpp) and writes its C
// header from it (export/dispatch_header.cpp); the runtime decodes it. Decoding
// refuses a malformed manifest, another schema version and a bucket whose
// recorded steps are not what the layer program computes for its stage
// variants, with one line (Errc::invalid_input).
//
// What the manifest only documents for hosts that launch without the runtime
// -- the byte layouts of ft::MoeArgs and ft::ShuffleArgs, the weight layouts'
// offsets, an fp8 problem's scale tensors -- is written from the structs and
// the layer program themselves (manifest/layouts.hpp), never stored twice.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/error.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"
#include "layer/operation.hpp"
#include "layer/program.hpp"

namespace ft::manifest {

// 4: a problem's "backward" (the backward program's buckets, docs/EXPORT.md).
// 3: the formulas that restated the layer program (max_padded_rows_formula,
// workspace_bytes) are gone (buffers_at_bucket and the steps hold its numbers;
// the runtime computes them for any T). 2: the layer program's steps. 1: before.
inline constexpr int kSchemaVersion = 4;
inline constexpr const char* kSelectionRule = "the smallest tuned bucket >= T, else the largest bucket";

// The bucket that serves `tokens`: the index of the smallest tuned bucket >=
// tokens, else of the largest. `buckets` ascending and not empty.
std::size_t select_bucket(std::span<const int> buckets, int tokens);

// Where the winners were measured, and by which compiler they were built.
struct MeasuredOn {
  std::string runtime, name, arch;
  int compute_units = 0;
  std::int64_t memory_bytes = 0;
  std::string driver_version, runtime_version;
};
struct Toolchain {
  std::string backend, version;
};

// The support unit of one dtype (generator/emitter.hpp emit_support): its code
// object and the entry of each support kernel; "" where the unit lacks an
// optional one (units recorded before 16-bit partials or the wide align; the
// quantise entries only in the e4m3 unit).
struct SupportUnit {
  DType dtype = DType::bf16;
  std::string code_object;
  std::string source;     // "database" or "compiled by flytune export"
  std::string toolchain;
  // The entry of each support kernel (layer/support_kernels.def), by Support.
  std::array<std::string, kSupportCount> symbols;
  const std::string& symbol(Support s) const { return symbols[std::size_t(s)]; }
  // The entries of this flytune's unit for (target, dtype), the optional ones
  // where the unit holds them.
  // `saved`: it holds forward_saved (16-bit units of this flytune; older ones lack it).
  static SupportUnit of(const Target& t, DType d, bool partials16, bool wide_align, bool saved);
  bool wide_align() const { return !symbol(Support::align_count).empty() && !symbol(Support::align_scatter).empty(); }
};

struct Timing {
  double median = 0;
  std::optional<double> p10, p90;
};
struct Provenance {
  std::int64_t variant_id = 0, run_id = 0;
  std::string chosen_at;
  struct Run {
    std::string flytune_version, git_commit, templates_commit, hostname;
  };
  std::optional<Run> run;  // the run's record, where the database holds it
};

// KGroupedArgs' size before c16 was appended: kernels of such an export never write 16-bit dW.
inline constexpr std::size_t kKGroupedArgsBeforeC16 = 88;
static_assert(offsetof(KGroupedArgs, c16) == kKGroupedArgsBeforeC16, "c16 is the first field after those 88 bytes");

// One tuned bucket: the layer winner's stage variants (the recipe) and the
// program the layer program builds from them at `tokens`. A backward bucket
// (ProblemEntry::backward) holds a backward recipe (LayerRecipe::grad: a
// configuration per role of op::moe_backward) and build_backward_program's.
struct Bucket {
  int tokens = 0;
  std::string kernel_name;  // "<stage1>+<stage2>"; backward: "<dgrad2>+<dgrad1>+<wgrad2>+<wgrad1>"
  LayerRecipe recipe;       // target, problem and wide_align: the manifest's
  LayerProgram program;     // its operation's build(recipe, tokens)
  const op::Operation& operation() const { return recipe.grad.empty() ? op::moe_forward() : op::moe_backward(); }
  std::map<std::string, std::string> code_objects;  // file of each launch step's symbol
  Timing time_us;
  Provenance provenance;
  std::optional<double> speedup_vs_default;
  // A backward bucket: the bytes of ft::KGroupedArgs its wgrad kernels were
  // built with ("kgrouped_args_bytes"; an export without it predates
  // KGroupedArgs::c16, kKGroupedArgsBeforeC16): what they read of the struct.
  std::size_t kgrouped_args_bytes = kKGroupedArgsBeforeC16;
};

struct ProblemEntry {
  std::string key;  // Problem::key() when exported
  Problem problem;
  std::string activation, routing;  // as the database records them
  std::vector<Bucket> buckets;      // ascending tokens
  // Buckets the search left without a layer winner (export --allow-missing),
  // ascending; none is also a bucket.
  std::vector<int> missing_buckets;
  // The backward's buckets, ascending (flytune search --pass backward|both);
  // empty when the export has no backward for this problem.
  std::vector<Bucket> backward;
  const Bucket& bucket_for(int tokens) const;  // select_bucket over the buckets
  const Bucket* backward_for(int tokens) const;  // select_bucket over the backward's; null without one
};

struct Manifest {
  const Target* target = nullptr;
  std::string code_object_format;  // "cubin", "hsaco", or "so" (host libraries for the CPU emulator)
  std::string exported_at, source_database;
  MeasuredOn device;
  Toolchain toolchain;
  std::vector<SupportUnit> supports;  // one per dtype
  std::vector<ProblemEntry> problems;

  const SupportUnit* support_for(DType d) const;  // nullptr when none
  std::vector<std::string> files() const;        // every code object named, once, sorted
};

nlohmann::json encode(const Manifest& m);
// Errc::invalid_input for a malformed manifest (missing or mistyped members,
// sizes out of range, an unknown format or dtype), another schema version, a
// problem without buckets or support unit, or a bucket (forward or backward)
// whose recorded steps are not its operation's program for its stages.
Result<Manifest> decode(const nlohmann::json& j);

}  // namespace ft::manifest
