#pragma once
// Kernel families as data. A family is one kind of stage kernel -- the tiled
// wave-level GEMM over mfma / mma.sync atoms, the Hopper wgmma GEMM, ... --
// and one file under generator/families/ declares all of it: its axes (the
// values of each preset, the `--space` spelling, the kernel-name token, the
// Config member), its legality rules, its resource estimates and its launch
// grid. The space (space.cpp), a variant's name, JSON and emitted Config
// (variant.cpp, emitter.cpp) and `--space` parsing are generic over this
// registry: adding an axis value or an epilogue option touches the family's
// file, its templates and its tests. Adding a family adds its file and one
// line in family.cpp's registry.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "generator/atoms.hpp"
#include "generator/device_facts.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"

namespace ft {

class Variant;

// The role a stage kernel plays in a layer recipe: stage 1 (gather, gate/up
// GEMM, SwiGLU) or stage 2 (down GEMM, routed weight, scatter). Spelled
// "moe1" / "moe2" in names, JSON and the database.
enum class StageRole : std::uint8_t { stage1, stage2 };
inline constexpr std::array<StageRole, 2> kStageRoles{StageRole::stage1, StageRole::stage2};
std::string_view to_string(StageRole r);
std::optional<StageRole> parse_stage_role(std::string_view s);

// What a layer needs to know of its stage kernels (the layer program reads
// these; families state them through standard axes, see Family::contract).
// The enums are the kernels' own (templates/ft/moe_args.hpp): ft::Reduce
// (stage 2 adds fp32 atomics into [T,H], or writes per-slot partials) and
// ft::WeightLayout (templates/ft/weight_layout.hpp).
// kReduceModes: the modes with a reduce kernel (the support unit's); kDirectYModes:
// stage 2 writes Y itself (no reduce step: moe_args.hpp, writes_y).
inline constexpr std::array<Reduce, 3> kReduceModes{Reduce::atomic, Reduce::partials, Reduce::partials16};
inline constexpr std::array<Reduce, 2> kDirectYModes{Reduce::atomic_y, Reduce::partials_y};
std::string_view to_string(Reduce r);
std::string_view to_string(WeightLayout l);

struct StageContract {
  int rows_per_tile = 0;             // a layer's row block is a multiple of it (tiles never straddle experts)
  WeightLayout weights = WeightLayout::plain;  // which copy of the weights the stage reads
  Reduce output = Reduce::atomic;  // stage 2: how it writes the layer's sums
  bool weight_in_stage1 = false;     // where the routed weight is applied (both stages must agree)
  // The stage's kernel aligns the pairs itself and its moe2 unit runs the
  // whole layer (the one-launch family): the layer program is a clear of
  // y_acc's head and one launch, and pairs only twins (layer/program.cpp).
  bool whole_layer = false;
  // Its persistent blocks take their tiles from a ticket counter the layer
  // clears before the stages (MoeArgs::tile_tickets, templates/ft/tile_order.hpp).
  bool tile_tickets = false;
};

struct LaunchShape {
  int grid_x = 1, grid_y = 1, grid_z = 1;
  int block = 1;
  int lds_bytes = 0;  // dynamic LDS / shared memory
};

// One value of an axis: an integer (tile sizes, counts), 0/1 (booleans), the
// index of a choice (reduce, layout), an index into all_atoms() (the atom), or
// two integers packed by pack_pair (warps).
using AxisValue = int;
constexpr AxisValue pack_pair(int a, int b) { return a << 16 | b; }
constexpr int pair_first(AxisValue v) { return v >> 16; }
constexpr int pair_second(AxisValue v) { return v & 0xffff; }

enum class AxisType : std::uint8_t { integer, boolean, choice, pair, atom };

enum class Preset : std::uint8_t { default_, wide, small };

struct Axis {
  std::string_view key;        // JSON key and Config member (pair: see pair_keys)
  AxisType type = AxisType::integer;
  std::string_view spelling;   // its name in --space; empty: not settable there
  // choice: the value names (index = value); boolean: the --space words for false, true.
  std::vector<std::string_view> names;
  std::string_view cpp_type;   // the Config member's type (integer, boolean, choice)
  std::array<std::string_view, 2> pair_keys;  // pair: the two JSON keys / Config members
  // Values per preset (the atom axis ignores these: every atom of the target
  // the family takes, unless --space names some).
  std::vector<AxisValue> defaults, wide, small;
  AxisValue initial = 0;       // a new variant's value; a record without the key takes it
  int least = 1;               // integer: the smallest value --space takes
  // Its presets are empty: the family's variants exist only where --space
  // gives values (the one-launch family's ol_blocks).
  bool opt_in = false;
  bool required = false;       // a record (JSON) must carry the key
  // An axis that does not apply to a variant (given the axes before it) takes
  // inactive(v) and is not enumerated. null: always applies / initial.
  bool (*applies)(const Variant&) = nullptr;
  AxisValue (*inactive)(const Variant&) = nullptr;
  // An axis of some variants only (the fp8 axes of an e4m3 variant): where
  // present(v) is false it takes `initial` and is left out of the name, the
  // JSON and the emitted Config, so variants without it are as before it
  // existed. null: always present.
  bool (*present)(const Variant&) = nullptr;
  // An axis whose value the problem decides (an fp8 layer's scales): not
  // enumerated; the space sets from_problem(problem). null: enumerated.
  AxisValue (*from_problem)(const Problem&) = nullptr;
  // The axis's part of the kernel name, possibly empty.
  std::string (*token)(const Variant&, AxisValue) = nullptr;
  int name_rank = 0;           // tokens are joined in this order

  const std::vector<AxisValue>& preset(Preset p) const;
  std::string format(AxisValue v) const;        // for messages and --space: "64", "2x2", "on", "atomic"
  Result<AxisValue> parse(std::string_view text) const;  // one --space value
  bool present_in(const Variant& v) const { return !present || present(v); }
};

class Family {
 public:
  virtual ~Family() = default;
  virtual std::string_view id() const = 0;      // "tiled", "wgmma": JSON and messages
  virtual bool takes(const AtomInfo& atom) const = 0;
  // In enumeration order: the first axis varies slowest. Config members come in this order too.
  virtual std::span<const Axis> axes() const = 0;
  // The device template a unit instantiates for a role. The default: the
  // stage templates, "ft::Stage1<Config>" / "ft::Stage2<Config>"
  // (templates/ft/moe_stage1.hpp, moe_stage2.hpp).
  virtual std::string_view kernel_template(StageRole role) const;
  // The macro that declares the unit's entry point (templates/ft/port_*.hpp):
  // "FT_KERNEL", or "FT_KERNEL_REBALANCED" for kernels whose warpgroups move
  // registers between them (one block per SM).
  virtual std::string_view kernel_macro(const Variant&) const { return "FT_KERNEL"; }

  // Threads of one block. The default: warps_m x warps_n warps of the atom's
  // lanes, plus a producer warpgroup (4 warps) where warp_specialized is on
  // (axes::warps, axes::warp_specialized).
  virtual int threads(const Variant& v) const;
  // Dynamic LDS / shared memory of one block; emitted units static_assert the templates agree.
  virtual int lds_bytes(const Variant& v) const = 0;
  // The most dynamic LDS a launch of it asks for: the limit a loader raises on
  // its function (CUDA needs it above 48 KiB). The default: lds_bytes.
  virtual int lds_limit(const Variant& v) const { return lds_bytes(v); }
  // Registers per lane the kernel needs at least; a pre-compile estimate for legality.
  virtual int register_estimate(const Variant& v) const = 0;
  // The family's own rules on its axes alone, then on a problem; nullopt when legal.
  // (The rules every family shares -- atom on the target, dtype, lanes, block
  // threads, LDS, registers -- are space.cpp's.)
  virtual std::optional<std::string> shape_rules(const Variant& v) const = 0;
  virtual std::optional<std::string> problem_rules(const Variant& v, const Problem& p) const = 0;

  // The stage's grid over a layer whose sorted_ids hold `padded_rows` rows.
  // Only the layer program calls this. The default: (padded_rows / tile_m,
  // N / tile_n, split_k), or for tiles_per_block > 1 a persistent grid of
  // ceil(tiles / tiles_per_block) blocks (templates/ft/tile_order.hpp).
  virtual LaunchShape launch(const Variant& v, const Problem& p, long long padded_rows) const;
  // The default reads the standard axes tile_m, layout, reduce, weight_in_stage1.
  virtual StageContract contract(const Variant& v) const;

  // Index of the axis with this key (pair axes also answer to their pair keys); axes().size() if none.
  std::size_t index_of(std::string_view key) const;
};

// The registry, in enumeration order.
std::span<const Family* const> all_families();
const Family* find_family(std::string_view id);
// The first family in the registry that takes this atom (nullptr: none): the
// family of a record that names none. Others may take it too (the one-launch
// family takes the tiled family's 16-bit atoms).
const Family* family_of(const AtomInfo& atom);

// Rules every standard stage family shares: the stage's tiles must divide the
// problem (stage 1: tile_n | I, tile_k | H; stage 2: tile_n | H, tile_k *
// split_k | I) and split-K needs atomic sums.
std::optional<std::string> standard_problem_rules(const Variant& v, const Problem& p);

}  // namespace ft
