// The one-launch family: the whole MoE layer at small T as one persistent
// kernel over the 16-bit mfma / mma.sync atoms (templates/ft/moe_onelaunch.hpp,
// docs/ONELAUNCH.md): the align in every block's LDS, stage-1 and stage-2
// tiles taken by one ticket, stage 2 released per row block by arrival
// counters, Y finished in slot order. Its moe1 and moe2 variants of the same
// values are twins: the moe1 unit runs stage 1 alone (the search verifies and
// times it), the moe2 unit stage 2 alone or, in a layer, everything; a layer
// pairs only twins (layer/program.cpp). Opt-in: ol_blocks, the persistent
// grid, has no preset values, so the family adds no variant to a space
// unless --space names some ("...;ol_blocks=264,528").
#include <algorithm>

#include <fmt/format.h>

#include "generator/families/families.hpp"
#include "generator/variant.hpp"

namespace ft {
namespace {

using axes::Values;

bool never(const Variant&) { return false; }

// A standard axis the layer program reads, fixed here: not enumerated, and
// --space's shared spellings (split_k=, reduce=) leave this family alone.
Axis fixed(Axis a, AxisValue value, AxisValue (*inactive)(const Variant&)) {
  a.defaults = {value};
  a.initial = value;
  a.applies = never;
  a.inactive = inactive;
  return a;
}

Axis blocks_axis() {
  Axis a;
  a.key = "ol_blocks";
  a.type = AxisType::integer;
  a.spelling = "ol_blocks";
  a.cpp_type = "int";
  a.initial = 1;
  a.required = true;
  a.opt_in = true;  // no preset values: the family is searched where --space gives them
  a.token = [](const Variant&, AxisValue x) { return fmt::format("_ol{}", x); };
  a.name_rank = axes::kOneLaunch;
  return a;
}

class OneLaunchFamily final : public Family {
 public:
  OneLaunchFamily() {
    axes_.push_back(axes::atom());
    axes_.push_back(blocks_axis());  // second: an empty preset ends the enumeration at once
    axes_.push_back(axes::tile_m("ol_tile_m", Values{{16, 32}}, 16));
    // Stage 1's columns per tile; stage 2 takes twice as many (the same rows staged).
    axes_.push_back(axes::tile_n("ol_tile_n", Values{{8, 16, 32}}, 16));
    axes_.push_back(axes::tile_k("ol_tile_k", Values{{64, 128}}, 64));
    axes_.push_back(axes::warps("ol_warps", Values{{pack_pair(1, 1), pack_pair(1, 2), pack_pair(1, 4)}}, pack_pair(1, 1)));
    axes_.push_back(axes::stages("", Values{{2}}, 2));
    axes_.push_back(axes::warp_specialized("", Values{{0}}));
    axes_.push_back(axes::tiles_per_block("", Values{{1}}));
    axes_.push_back(axes::weight_in_stage1(Values{{0}}));
    axes_.push_back(fixed(axes::layout("", Values{{int(WeightLayout::plain)}}), int(WeightLayout::plain),
                          [](const Variant&) { return AxisValue(WeightLayout::plain); }));
    axes_.push_back(fixed(axes::split_k(Values{{1}}), 1, [](const Variant&) { return AxisValue(1); }));
    axes_.push_back(fixed(axes::reduce(Values{{int(Reduce::partials_y)}}), int(Reduce::partials_y),
                          [](const Variant&) { return AxisValue(Reduce::partials_y); }));
  }

  std::string_view id() const override { return "onelaunch"; }
  bool takes(const AtomInfo& a) const override { return (a.family == "mfma" || a.family == "mma.sync") && a.operand_bytes() == 2; }
  std::span<const Axis> axes() const override { return axes_; }
  std::string_view kernel_template(StageRole role) const override {
    return role == StageRole::stage1 ? "ft::OneLaunch<Config, 1>" : "ft::OneLaunch<Config, 2>";
  }

  // ft::OneLaunch::kSmemBytes: the tiled GEMM's LDS for tile_m + 2 tile_n rows
  // (stage 1's gate and up rows, stage 2's twice as wide tile), rounded to 16
  // bytes; the launch adds the route tables (onelaunch_route_bytes).
  int lds_bytes(const Variant& v) const override {
    const int rows = v.get("tile_m") + 2 * v.get("tile_n");
    const int gemm = v.get("stages") * rows * (v.get("tile_k") + 8) * 2;
    return (gemm + 15) / 16 * 16;
  }

  // The launch adds route tables that grow with T (build_program refuses a T
  // whose tables do not fit): a loader allows the target's whole LDS.
  int lds_limit(const Variant& v) const override { return v.target->lds_bytes; }

  // Both units hold both GEMMs: the larger estimate, plus what lives across
  // the ticket loop (the argument copy, the route tables' pointers, the item
  // bounds). 40, from NVRTC 13.0 on sm_90a: 1x1 warps at tile_n 16, tile_k
  // 128 (24 staged chunks a thread, estimate 220 + 40 > 255) spill, at tile_n
  // 8 (16 chunks, 154 + 40) they do not (tests/compile/onelaunch_compile_test.cpp).
  int register_estimate(const Variant& v) const override {
    constexpr int kAcrossTheLoop = 40;
    return std::max(tiled_registers(v, v.get("tile_n"), 2), tiled_registers(v, 2 * v.get("tile_n"), 1)) + kAcrossTheLoop;
  }

  std::optional<std::string> shape_rules(const Variant& v) const override {
    const AtomInfo& a = *v.atom();
    const int tm = v.get("tile_m"), tn = v.get("tile_n"), tk = v.get("tile_k"), wm = v.get("warps_m"), wn = v.get("warps_n");
    if (tm % (wm * a.m) != 0) return fmt::format("tile_m {} is not a multiple of warps_m {} x atom M {}", tm, wm, a.m);
    if (tn % (wn * a.n) != 0) return fmt::format("tile_n {} is not a multiple of warps_n {} x atom N {}", tn, wn, a.n);
    if (tk % a.k != 0 || tk % 8 != 0) return fmt::format("tile_k {} is not a multiple of atom K {} and of 8", tk, a.k);
    if (v.get("stages") != 2) return fmt::format("stages {}: the one-launch GEMMs ping-pong (2)", v.get("stages"));
    if (v.get("ol_blocks") < 1) return fmt::format("ol_blocks {} is not a positive grid", v.get("ol_blocks"));
    return std::nullopt;
  }

  // The same rules for both twins: each unit runs both stages' tiles.
  std::optional<std::string> problem_rules(const Variant& v, const Problem& p) const override {
    if (p.fp8()) return std::string("the one-launch layer is 16-bit (bf16, f16)");
    const int tn = v.get("tile_n"), tk = v.get("tile_k");
    if (p.inter % tn != 0 || p.inter % tk != 0)
      return fmt::format("inter {} is not a multiple of tile_n {} and tile_k {}", p.inter, tn, tk);
    if (p.hidden % tk != 0 || p.hidden % (2 * tn) != 0)
      return fmt::format("hidden {} is not a multiple of tile_k {} and of stage 2's tile_n {}", p.hidden, tk, 2 * tn);
    if (p.hidden % kDirectYColumns != 0)
      return fmt::format("Y is finished per {} columns: hidden {} is not a multiple", kDirectYColumns, p.hidden);
    return std::nullopt;
  }

  // A persistent grid of ol_blocks blocks, at most one per work item (the
  // routed row blocks' stage-1 and stage-2 tiles); the route tables after the
  // GEMMs' LDS.
  LaunchShape launch(const Variant& v, const Problem& p, long long padded_rows) const override {
    const int tm = v.get("tile_m"), tn = v.get("tile_n");
    const long long items = padded_rows / tm * (p.inter / tn + p.hidden / (2 * tn));
    LaunchShape s;
    s.grid_x = int(std::clamp<long long>(items, 1, v.get("ol_blocks")));
    s.block = v.threads();
    s.lds_bytes = int(v.lds_bytes() + onelaunch_route_bytes(padded_rows, tm, p.experts));
    return s;
  }

  StageContract contract(const Variant& v) const override {
    StageContract c = Family::contract(v);
    c.whole_layer = true;
    return c;
  }

 private:
  std::vector<Axis> axes_;
};

}  // namespace

const Family& onelaunch_family() {
  static const OneLaunchFamily family;
  return family;
}

}  // namespace ft
