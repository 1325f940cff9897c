#pragma once
// The one layer program. Every launch rule of the MoE layer lives here: from
// the stage variants, the problem and the token count T it computes the
// ordered steps of a layer -- entry point, grid, block, dynamic shared memory,
// the argument bytes, the memsets and which copy of the weights each stage
// reads -- and what every buffer must hold. layer/execute.hpp runs a program
// on any Device. The search times, verify checks, the export records (its
// manifest's steps are this program's output), and the runtime launches the
// same program: there is no second copy of these rules.
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "generator/backward_gemm.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "generator/variant.hpp"
#include "layer/device_structs.hpp"

namespace ft {

// Rows of one expert block in sorted_ids: a multiple of every stage's tile_m
// (a tile never straddles two experts), at most this.
inline constexpr int kMaxAlignBlock = 256;
// The largest token count a layer takes (sizes stay within 32-bit arguments).
inline constexpr int kMaxTokens = 1 << 24;

// How a layer sorts its pairs by expert: one block (templates/ft/moe_align.hpp,
// moe_align) up to kWideAlignPairs pairs, above that the wide align's two
// launches of align_blocks(pairs) blocks (moe_align_count, moe_align_scatter):
// one block scanning 131072 pairs twice costs hundreds of microseconds, two
// small launches a few. The threshold is where two launches cost less than the
// one block's scan, a guess checked on the H200 (docs/PERFORMANCE.md).
enum class AlignForm : std::uint8_t { one_block, wide };
inline constexpr long long kWideAlignPairs = 16384;
AlignForm align_form(const Problem& p, int tokens);

// Capacity of sorted_ids: every pair, plus at most align_block - 1 padding rows
// for each expert that has tokens, rounded to whole blocks. Needs no routing
// information, so the host never waits for the device.
long long max_padded_rows(const Problem& p, int tokens, int align_block);
// The most 32-bit words of sorted_ids any program at `tokens` uses: the rows
// of the largest row block, plus the wide align's count table. For callers
// that allocate once for every program (LayerBench, the emulator workloads).
long long sorted_ids_capacity(const Problem& p, int tokens);
// Likewise the most bytes of y_acc: k fp32 rows per token (partials) after
// the _y modes' arrival counters.
long long y_acc_capacity(const Problem& p, int tokens);

LaunchShape align_launch(const Problem& p);
// A stage's grid over max_padded_rows rows, as its family lays it out
// (Family::launch: for the standard families (max_padded_rows / tile_m,
// N / tile_n, split_k), or a persistent grid of ceil(tiles / tiles_per_block)
// blocks that walk the tiles, templates/ft/tile_order.hpp).
LaunchShape stage_launch(const Variant& v, const Problem& p, int tokens, int align_block);
LaunchShape reduce_launch(const Problem& p, int tokens);
// fp8 layers: one block per row of X (T) or of the intermediate (T*k).
LaunchShape quantise_launch(long long rows);
// The support kernels verification and weight arrangement use.
LaunchShape shuffle_launch(long long rows, long long cols);
// Weights [rows, cols] of `element_bytes` (2, or 1: fp8 codes) arranged from
// src to dst in `layout` by the shuffle kernel, which moves 16-bit elements:
// a row of fp8 codes is arranged as the 16-bit row of its cols / 2 byte pairs,
// so an 8-bit layout's blocks are the 16-bit layout's blocks of bytes
// (templates/ft/weight_layout.hpp). Errc::usage for a layout other than
// shuffled or tiled, or sizes it cannot hold: rows a multiple of 16, the
// 16-bit columns of 8 (shuffled) or 64 (tiled).
struct ArrangeLaunch {
  ShuffleArgs args;
  LaunchShape shape;
};
Result<ArrangeLaunch> arrange_launch(std::uint64_t src, std::uint64_t dst, long long rows, long long cols, int element_bytes,
                                     WeightLayout layout);
LaunchShape reference_launch(StageRole stage, const Problem& p, int tokens);
LaunchShape fill_launch(std::uint64_t count);
// fp8 verification: the reference intermediate quantised, one thread per 128-value group.
LaunchShape reference_quantise_launch(const Problem& p, int tokens);

// The buffers a layer's steps read and write: the rows of layer/buffers.def
// (name, MoeArgs member, pointee type, place, meaning, size rule), in order.
enum class Buf : std::uint8_t {
#define FT_BUFFER(name, member, pointee, place, meaning, size) name,
#include "layer/buffers.def"
#undef FT_BUFFER
};
inline constexpr std::size_t kBufCount = 0
#define FT_BUFFER(name, member, pointee, place, meaning, size) +1
#include "layer/buffers.def"
#undef FT_BUFFER
    ;
// Whose a buffer is and how long it lives (layer/buffers.def, the place column).
enum class BufPlace : std::uint8_t { input, weights, copy, workspace, output, optional };
struct BufferInfo {
  std::string_view name;     // as in the manifest
  std::string_view member;   // the MoeArgs pointer a launch reads it through
  std::string_view pointee;  // its C type
  BufPlace place;
  std::string_view meaning;
};
const BufferInfo& buffer_info(Buf b);
std::string_view to_string(Buf b);
// W1 (which = 1) or W2 (which = 2) in a layout.
Buf weight_buffer(int which, WeightLayout layout);
// The tensor map a mapped stage (WeightLayout::mapped) reads weight matrix
// `which` (1: W1 [E * 2I, H], 2: W2 [E * H, I]) through, its address left 0; none
// for the other layouts.
std::optional<TensorMapSpec> weight_map_of(const Variant& v, const Problem& p, int which);
// The buffers a layer needs only while it runs: the caller's workspace.
bool is_workspace(Buf b);

// The shape of an fp8 layer's scale tensor the caller passes (Buf::x_scale,
// w1_scales, w2_scales, inter_scale; fp32, row-major): per-tensor [1] / [E] /
// [E] / -; per-token - / [E, 2I] / [E, H] / -; block128 - / [E, 2I/128, H/128] /
// [E, H/128, I/128] / -; static [1] / [E] / [E] / [1]. Rank 0 where the layer
// reads none (16-bit problems, x_scale outside per-tensor and static,
// inter_scale outside static, any other buffer). The one home of this rule:
// the layer program sizes the buffers by it, the manifest and the C API
// (ft_plan_scale_shape) report it.
struct ScaleShape {
  int rank = 0;
  std::array<long long, 3> dims{};
  long long count() const;  // elements (0 for rank 0)
};
ScaleShape scale_shape(const Problem& p, Buf b);

// Which kernel a launch step runs.
enum class Role : std::uint8_t {
  align, stage1, stage2, reduce_atomic, reduce_partials, reduce_partials16,
  align_count, align_scatter,    // the wide align's two launches
  quantise_x, quantise_inter,    // fp8 layers: X, and a bf16 intermediate, to e4m3 with scales
  // The backward (layer/backward.hpp): the stage-2 and stage-1 dgrad GEMMs,
  // the K-grouped GEMMs of dW2 and dW1 (generator/backward_gemm.hpp).
  dgrad2, dgrad1, wgrad2, wgrad1,
};
// The number of roles: a table indexed by Role (RoleKernels, layer/execute.hpp)
// has this many slots. The last value above plus one; a role is appended
// before the end of the list above only with this line moved to it.
inline constexpr std::size_t kRoleCount = std::size_t(Role::wgrad1) + 1;
// The reduce kernel's role for a stage-2 output mode.
Role reduce_role(Reduce r);
std::string_view to_string(Role r);

struct Step {
  enum class Op : std::uint8_t { memset_u32, launch };
  Op op = Op::launch;
  std::string name;  // "clear_y_acc", "quantise_x", "align", "stage1", "quantise_inter", "stage2", "reduce"
  // memset_u32: `count` 32-bit words of `buffer` set to `value`.
  Buf buffer = Buf::y_acc;
  std::uint32_t value = 0;
  std::uint64_t count = 0;
  // launch: `symbol` with `shape` and the argument `args`, whose pointer
  // fields are filled from the buffer table at execution (w1 and w2 from the
  // buffers named here: the layout this stage reads).
  Role role = Role::align;
  std::string symbol;
  LaunchShape shape;
  MoeArgs args{};
  Buf w1 = Buf::w1, w2 = Buf::w2;
  // A stage that reads its weights through a tensor map (WeightLayout::mapped):
  // the map's matrix and box, all but the address, which execution takes from
  // the step's weights buffer (stage 1: w1, stage 2: w2) and encodes into the
  // kernel's ft::MappedMoeArgs (templates/ft/moe_mapped_args.hpp).
  std::optional<TensorMapSpec> weight_map;
};

// What a launch step's pointers are bound into (layer/execute.cpp): the
// kernels' MoeArgs, then the backward's buffers (layer/buffers.def's last
// rows), which its steps' argument structs take (layer/backward.hpp,
// backward_kernel_args). Host-side only: a forward kernel gets the MoeArgs.
struct StepArgs : MoeArgs {
  const u16* dy;
  const u16* saved_gate_up;
  const u16* saved_inter;
  u16* d_gate_up;
  float* d_weights;
  float* dx;
  float* dw1;
  float* dw2;
  u16* dw1_16;
  u16* dw2_16;
};

// A backward stage of a recipe: the backward GEMM configuration that runs in
// one of the backward's launch roles (dgrad2, dgrad1, wgrad2, wgrad1).
struct GradStage {
  Role role = Role::dgrad2;
  BackwardVariant kernel;
};

// What a program is built from: the stage variants of one operation
// (layer/operation.hpp; the forward layer's are stage 1 and stage 2), in the
// operation's role order: all of them (a layer), or one alone (the search
// verifies and times stages one at a time; a stage-2 program reads the
// intermediate it is given).
struct LayerRecipe {
  const Target* target = nullptr;
  Problem problem;
  std::vector<Variant> stages;
  // The backward operation's stages (op::moe_backward, layer/backward.hpp), in
  // its role order; empty in a forward recipe (and `stages` empty in a backward one).
  std::vector<GradStage> grad;
  // The support unit holds the wide align's kernels (every one this flytune
  // builds does; exports of databases recorded before it existed do not, and
  // their layers align in one block at any size, as they were verified).
  bool wide_align = true;
  // The stage variant in a role, or null where the recipe has none.
  const Variant* stage(StageRole role) const;
  Variant* stage(StageRole role);
};
// The stages list of a recipe from the variants a caller may or may not hold.
std::vector<Variant> stage_list(const std::optional<Variant>& stage1, const std::optional<Variant>& stage2);

struct LayerProgram {
  int tokens = 0;
  int align_block = 0;
  long long max_padded_rows = 0;
  std::vector<Step> steps;
  std::array<std::uint64_t, kBufCount> bytes{};  // what each buffer must hold; 0: no step reads it
  const Step* find(std::string_view step_name) const;
  std::size_t index_of(std::string_view step_name) const;  // steps.size() when absent
};

// Whether a step of the program launches this stage variant's kernel (every
// stage of a layer, but the one-launch family's moe1 twin: its moe2 unit runs
// the whole layer). The export ships, and the runtime loads, only these.
bool launches(const LayerProgram& p, const Variant& stage);
// Whether a launch step of the program runs the entry `symbol`.
bool launches(const LayerProgram& p, std::string_view symbol);

// The row block of a recipe: the least common multiple of its stages' tile_m
// (Errc::invalid_input above kMaxAlignBlock, with the tiles named).
Result<int> align_block_of(const LayerRecipe& r);
// Whether a layer of these two stages can run at all (any T): the rule
// build_program applies to a recipe -- kinds, dtypes, each stage's problem
// rules, the routed weight applied in the same stage by both, a row block (the
// least common multiple of the tiles) of at most kMaxAlignBlock rows. The one
// home of "which stage pairs fit": the search pairs stages by it.
// Errc::invalid_input saying why not.
Status pair_fits(const Target& t, const Problem& p, const Variant& stage1, const Variant& stage2);
// Errc::invalid_input for a recipe that cannot run (kinds, dtypes, the routed
// weight's placement, tiles that do not divide the problem) or a token count
// outside 1..kMaxTokens.
//
// An fp8 layer (Problem::fp8) quantises X first (quantise_x: xq and x_scales)
// and hands stage 2 the intermediate as e4m3 codes with 1 x 128 group scales
// (inter_q, inter_scales): written by stage 1 itself (quantise-on-store) or by
// a quantise_inter step after it (from the bf16 inter). A stage-1 program
// alone ends with that step too, so a stage's output is always the one stage 2
// reads; a stage-2 program alone reads the inter_q and inter_scales it is given.
Result<LayerProgram> build_program(const LayerRecipe& r, int tokens);
// The 32-bit words of y_acc a layer zeroes before stage 2 (its clear_y_acc
// step): atomic sums need zeros, partial rows are written whole; the _y modes'
// arrival counters at the head of y_acc too. 0: no clear.
std::uint64_t y_acc_clear_words(Reduce stage2_output, const Problem& p, int tokens);
// Up to this many words, a _y layer whose align runs in one block has align
// zero them (MoeArgs flags kFlagAlignClears*: one block writes 128 KiB in about
// the time a memset launch takes); above, a clear_y_acc step. Old exports'
// aligns do not clear, but they have no _y stages.
inline constexpr std::uint64_t kAlignClearWords = 32768;
// Whether stage 1 of this variant leaves the intermediate as bf16 for a
// quantise_inter step (an fp8 variant without quantise-on-store, not of a
// static intermediate scale: such a stage 1 quantises with it on store).
bool needs_quantise_inter(const Variant& stage1);
// The align step(s) alone with a given row block and form (checks of align
// against the CPU); by default the form a layer of that size uses.
Result<LayerProgram> build_align_program(const Target& t, const Problem& p, int tokens, int align_block, AlignForm form);
inline Result<LayerProgram> build_align_program(const Target& t, const Problem& p, int tokens, int align_block) {
  return build_align_program(t, p, tokens, align_block, align_form(p, tokens));
}

// Where each workspace buffer of a program sits in one caller-provided
// workspace: in Buf order, each start a multiple of kWorkspaceAlign, `total`
// bytes in all. The runtime carves a caller's workspace this way (the C API's
// ft_layer_buffers::workspace, the Python package's XLA / torch workspace).
inline constexpr std::uint64_t kWorkspaceAlign = 256;
struct WorkspacePlacement {
  std::array<std::uint64_t, kBufCount> offset{};
  std::uint64_t total = 0;
};
WorkspacePlacement workspace_placement(const LayerProgram& p);

// The steps as data, for the manifest and for comparing two programs: names,
// symbols, grids, blocks, shared memory, the argument scalars and the buffer
// each pointer field takes.
nlohmann::json steps_json(const LayerProgram& p);
// Buffer sizes (bytes) by name, the ones a program reads.
nlohmann::json buffers_json(const LayerProgram& p);

}  // namespace ft
