// The wgmma family (sm_90a): one to three consumer warpgroups issue
// wgmma.mma_async from descriptors over 128-byte-swizzled shared memory, fed
// by a cp.async ring all threads share or by a producer warpgroup that moves
// tiled weights with bulk copies, optionally in persistent blocks
// (templates/ft/wgmma_gemm.hpp, docs/HOPPER.md).
#include <algorithm>

#include <fmt/format.h>

#include "generator/device_facts.hpp"
#include "generator/families/families.hpp"
#include "generator/variant.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft {
namespace {

using axes::Values;

// The weights follow the producer warpgroup: the shared ring reads plain
// ones; a producer's lane moves each weight tile by a bulk copy of tiled
// weights or (mapped, "_map") by a tensor-map load of the plain ones
// (templates/ft/wgmma_gemm.hpp), the axis wgmma_weights of producer blocks.
bool producer_block(const Variant& v) { return v.get("warp_specialized") != 0; }
AxisValue plain_weights(const Variant&) { return int(WeightLayout::plain); }
bool producer_layout(WeightLayout l) { return l == WeightLayout::tiled || l == WeightLayout::mapped; }
Axis weights_axis() {
  // tiled by default until mapped is measured on a GPU (opt-in: wgmma_weights=tiled,mapped; the wide preset has both).
  Axis a = axes::layout("wgmma_weights", Values{{int(WeightLayout::tiled)}, {int(WeightLayout::tiled), int(WeightLayout::mapped)}},
                        nullptr);
  a.applies = producer_block;
  a.inactive = plain_weights;
  return a;
}

// Ping-pong consumers (templates/ft/wgmma_gemm.hpp, Cfg::pingpong): the two
// consumer warpgroups of a persistent producer block take whole tiles in
// turn ("_pp"). An axis of those blocks only (8x1 warps, producer, more than
// one tile per block): elsewhere absent from names, JSON and Configs.
bool pingpong_block(const Variant& v) {
  return v.get("warp_specialized") != 0 && v.get("tiles_per_block") > 1 && v.get("warps_m") * v.get("warps_n") == 8;
}
bool pingpong(const Variant& v) { return pingpong_block(v) && v.get("pingpong") != 0; }
Axis pingpong_axis() {
  Axis a;
  a.key = "pingpong";
  a.type = AxisType::boolean;
  a.spelling = "wgmma_pingpong";
  a.names = {"off", "on"};
  a.cpp_type = "bool";
  a.defaults = {0, 1};
  a.present = pingpong_block;
  a.token = [](const Variant&, AxisValue x) { return std::string(x ? "_pp" : ""); };
  a.name_rank = axes::kTiles;  // after the tiles axis (its neighbour in the axes): "_t8_pp"
  return a;
}

// Register rebalance (templates/ft/wgmma_gemm.hpp, Cfg::rebalance, "_rb"):
// the producer warpgroup of a persistent block with two or three consumers
// gives registers back (setmaxnreg) and the consumers take them. An axis of
// those blocks only; legal only where the block does not fit the register
// file without it (elsewhere it would be the same kernel under two names).
bool rebalance_block(const Variant& v) {
  return v.get("warp_specialized") != 0 && v.get("tiles_per_block") > 1 && v.get("warps_m") * v.get("warps_n") >= 8;
}
bool rebalance(const Variant& v) { return rebalance_block(v) && v.get("rebalance") != 0; }
Axis rebalance_axis() {
  Axis a;
  a.key = "rebalance";
  a.type = AxisType::boolean;
  a.spelling = "wgmma_regs";
  a.names = {"even", "rebalance"};
  a.cpp_type = "bool";
  a.defaults = {0};  // opt-in (wgmma_regs=even,rebalance): measured slower on the H200 (docs/HOPPER.md)
  a.wide = {0, 1};
  a.present = rebalance_block;
  a.token = [](const Variant&, AxisValue x) { return std::string(x ? "_rb" : ""); };
  a.name_rank = axes::kTiles;  // after ping-pong (the axis before it): "_t8_rb"
  return a;
}

// Tile scheduling of persistent producer blocks (templates/ft/tile_order.hpp,
// Cfg::dynamic_tiles, "_dyn"): `dynamic` blocks take their tiles by tickets
// from a counter the layer clears (MoeArgs::tile_tickets), so the grid's
// partial last wave and the unused capacity's row blocks cost nothing;
// `static` walks block, block + grid, ... over the capacity. An axis of those
// blocks only: elsewhere absent from names, JSON and Configs.
bool persistent_producer_block(const Variant& v) {
  return v.get("warp_specialized") != 0 && v.get("tiles_per_block") > 1;
}
bool dynamic_tiles(const Variant& v) { return persistent_producer_block(v) && v.get("dynamic_tiles") != 0; }
Axis sched_axis() {
  Axis a;
  a.key = "dynamic_tiles";
  a.type = AxisType::boolean;
  a.spelling = "wgmma_sched";
  a.names = {"static", "dynamic"};
  a.cpp_type = "bool";
  a.defaults = {1};  // dynamic: faster in 7 of 8 stages measured on the H100 (docs/PERFORMANCE.md 2026-12-07)
  a.wide = {0, 1};
  a.present = persistent_producer_block;
  a.token = [](const Variant&, AxisValue x) { return std::string(x ? "_dyn" : ""); };
  a.name_rank = axes::kTiles;  // after the register split (the axis before it): "_t8_pp_dyn"
  return a;
}

class WgmmaFamily final : public Family {
 public:
  WgmmaFamily() {
    axes_.push_back(axes::atom());
    // 192: three consumer warpgroups (12x1).
    axes_.push_back(axes::tile_m("wgmma_tile_m", Values{{64, 128, 192}, {64, 128, 192, 256}, {64}}, 64));
    // 32: stage 1 with N = 64, more blocks at decode.
    axes_.push_back(axes::tile_n("wgmma_tile_n", Values{{32, 64, 128, 256}, {}, {64}}, 128));
    Axis k_tile = axes::tile_k("", Values{{64}}, 64);  // one 128-byte swizzle row: 64 16-bit values, 128 fp8 codes
    k_tile.applies = [](const Variant&) { return false; };
    k_tile.inactive = axes::k_tile_of_row;
    axes_.push_back(k_tile);
    axes_.push_back(axes::warps("wgmma_warps", Values{{pack_pair(4, 1), pack_pair(8, 1), pack_pair(12, 1)}, {}, {pack_pair(4, 1)}},
                                pack_pair(4, 1)));
    // Deeper rings keep more bytes in flight; 3 lets two blocks share an SM.
    axes_.push_back(axes::stages("wgmma_stages", Values{{3, 4, 7}, {3, 4, 5, 7}}, 4));
    // on: a producer warpgroup feeds mbarrier-synchronised consumers, weights
    // moved by bulk copies from the tiled layout (wins prefill); off: the
    // shared cp.async ring on plain weights (wins decode).
    axes_.push_back(axes::warp_specialized("wgmma_producer", Values{{0, 1}}));
    // Tiles each producer-warpgroup block computes in turn (n > 1: a
    // persistent grid whose rings run on from one tile into the next).
    axes_.push_back(axes::tiles_per_block("wgmma_tiles", Values{{1, 8}, {1, 4, 8}}));
    axes_.push_back(pingpong_axis());
    axes_.push_back(rebalance_axis());
    axes_.push_back(sched_axis());
    axes_.push_back(axes::weight_in_stage1(Values{{0}, {0, 1}}));
    axes_.push_back(weights_axis());
    axes_.push_back(axes::split_k(Values{{1, 4}, {1, 2, 4}}));
    // partials16: per-slot rows in the element type, no atomics (prefill at top-8);
    // atomic_y / partials_y: stage 2 writes Y, no reduce launch (decode; wide, or --space reduce=...).
    axes_.push_back(axes::reduce(Values{{int(Reduce::atomic), int(Reduce::partials16)},
                                        {int(Reduce::atomic), int(Reduce::partials), int(Reduce::partials16), int(Reduce::atomic_y),
                                         int(Reduce::partials_y)}}));
    // fp8 only: the layer's scales (the problem's) and stage 1's quantise-on-store.
    axes_.push_back(axes::scales());
    axes_.push_back(axes::inter_store(Values{{int(InterStore::bf16), int(InterStore::fp8)}}));
    // fp8 stage 2: group scales promote every k-tile; row scales accumulate
    // in wgmma (the m128n256 tile fits one accumulator set).
    axes_.push_back(axes::inter_scales(Values{{int(InterScales::group), int(InterScales::row)}}));
    // fp8 stage 1 with per-tensor / per-token scales: 0 keeps one accumulator
    // set (the big tiles fit), 1 promotes each k-tile (bounds Hopper's
    // reduced-precision fp8 accumulation); wide adds every 4.
    axes_.push_back(axes::promote(Values{{0, 1}, {0, 1, 4}}));
  }

  std::string_view id() const override { return "wgmma"; }
  bool takes(const AtomInfo& a) const override { return a.family == "wgmma"; }
  std::span<const Axis> axes() const override { return axes_; }
  std::string_view kernel_macro(const Variant& v) const override {
    return rebalance(v) ? "FT_KERNEL_REBALANCED" : "FT_KERNEL";
  }
  // ft::WgmmaGemm::kSmemBytes: 128-byte rows (one k-tile) of A and all weight
  // tiles per stage, plus 1024 bytes to align the ring for the swizzle; a
  // producer warpgroup adds a full and an empty mbarrier (8 bytes each) per
  // stage. Quantise-on-store stages its tile in the same memory afterwards.
  int lds_bytes(const Variant& v) const override {
    const int st = v.get("stages");
    const int ring = st * (v.get("tile_m") + v.weight_matrices() * v.get("tile_n")) * 128 + 1024 +
                     (v.get("warp_specialized") ? 16 * st : 0) + (pingpong(v) ? 16 : 0) +  // + two turn mbarriers
                     (rebalance(v) ? v.get("tile_m") * 64 : 0) +  // + the producer's A-row pointers (8 bytes a chunk)
                     (dynamic_tiles(v) ? 4 * (8 + 8 + 4) : 0);  // + the ticket ring: 4 slots, each two mbarriers and the ticket
    return std::max(ring, fp8::staged_bytes(v));
  }

  // A rebalanced producer warpgroup's lanes: addressing and a 64-bit pointer
  // per weight tile (their A-row pointers live in shared memory).
  static int producer_register_estimate(const Variant& v) { return 24 + 2 * v.weight_matrices(); }

  int register_estimate(const Variant& v) const override {
    const bool ws = v.get("warp_specialized") != 0;
    const int tm = v.get("tile_m"), tn = v.get("tile_n");
    // Rows per consumer warpgroup: its share of the tile, or (ping-pong) all of it.
    const int groups = pingpong(v) ? 1 : v.get("warps_m") * v.get("warps_n") / 4;
    // A promoting GEMM (fp8) keeps a second set: the promoted sums.
    const int acc = tm / groups / v.atom()->m * v.weight_matrices() * tn / 2 * (fp8::promotes(v) ? 2 : 1);
    // A producer warpgroup copies only A 16 bytes at a time (bulk copies move the weights).
    const int chunks = ws ? tm * 8 / 128 : (tm + v.weight_matrices() * tn) * 8 / threads(v);
    // Accumulators, a 64-bit source pointer per copy, addressing; a producer
    // warpgroup holds the pointers but no accumulators, yet all threads get
    // the kernel's register count.
    return ws ? std::max(acc, chunks * 2) + 24 : acc + chunks * 2 + 24;
  }

  // The shape rules of ft::WgmmaGemm (templates/ft/wgmma_gemm.hpp).
  std::optional<std::string> shape_rules(const Variant& v) const override {
    const int wm = v.get("warps_m"), wn = v.get("warps_n"), tm = v.get("tile_m"), tn = v.get("tile_n");
    const bool ws = v.get("warp_specialized") != 0;
    if (wn != 1 || wm % 4 != 0 || wm > 12)
      return fmt::format("wgmma needs 4x1, 8x1 or 12x1 warps (one to three warpgroups along M), not {}x{}", wm, wn);
    const int groups = pingpong(v) ? 1 : wm / 4, am = v.atom()->m;  // ping-pong: each warpgroup takes whole tiles
    if (tm % (groups * am) != 0)
      return fmt::format("tile_m {} does not give each of {} warpgroups whole {}-row wgmma blocks", tm, groups, am);
    if (pingpong(v) && fp8::promotes(v)) return std::string("ping-pong consumers do not promote (fp8: promote = 0 only)");
    const int n = v.weight_matrices() * tn;
    if (!wgmma_n_supported(n))
      return fmt::format("wgmma N = {} weight matrices x tile_n {} = {} is not 32, 64, 128 or 256", v.weight_matrices(), tn, n);
    if (const int tk = v.get("tile_k"); tk != axes::k_tile_of_row(v))
      return fmt::format("wgmma k-tiles are {} deep (one 128-byte swizzle row), not {}", axes::k_tile_of_row(v), tk);
    // fp8 with a producer warpgroup: its consumers promote (stage 2, block128,
    // promote >= 1) or accumulate fast, but do not quantise on store (the
    // producer leaves before the epilogue's block barriers); the tiled layout
    // holds fp8 codes as 16-bit byte pairs, a 128-byte slice row of 128 codes
    // (weight_layout.hpp).
    // Persistent blocks whose consumers promote: ptxas 13.0 serialises the
    // wgmma of several of them (C7518 / C7520, a compiler-inserted warpgroup
    // wait in a divergent path), so none is built.
    if (ws && fp8::promotes(v) && v.get("tiles_per_block") > 1)
      return fmt::format("{} tiles per block with promoting consumers: ptxas serialises their wgmma (one tile per block only)",
                         v.get("tiles_per_block"));
    if (ws && fp8::quantise_on_store(v))
      return std::string("quantise-on-store needs every thread in the epilogue, a producer warpgroup leaves before it");
    if (auto why = fp8::shape_rules(v)) return why;
    if (const int st = v.get("stages"); st < 3) return fmt::format("the wgmma ring needs at least 3 stages, not {}", st);
    if (const auto got = WeightLayout(v.get("layout")); ws ? !producer_layout(got) : got != WeightLayout::plain)
      return fmt::format("wgmma {} reads {} weights, not {} ones",
                         ws ? "with a producer warpgroup" : "without a producer warpgroup", ws ? "tiled or mapped" : "plain",
                         to_string(got));
    // The shared ring: every thread copies the same number of 16-byte chunks,
    // each in one swizzle phase (rows 8 apart).
    if (!ws) {
      const int chunks = (tm + n) * 8;
      if (chunks % threads(v) != 0 || threads(v) / 8 % 8 != 0)
        return fmt::format("{} rows of 16-byte chunks do not split evenly over {} threads", tm + n, threads(v));
    }
    // One block must fit the register file at the registers each thread needs
    // (without a rebalance the producer warpgroup of a specialised block gets
    // as many as the others: the launch gives every lane one count).
    const Target& t = *v.target;
    const int file = t.regs_file_per_simd * t.wave_size * t.simds_per_cu;
    const bool fits_even = v.register_estimate() * threads(v) <= file;
    if (!rebalance(v)) {
      if (!fits_even)
        return fmt::format("needs about {} registers per thread x {} threads, more than the {} of an SM", v.register_estimate(),
                           threads(v), file);
      return std::nullopt;
    }
    if (fits_even) return std::string("fits the register file evenly: rebalancing would build the same kernel again");
    using Split = ft::RegisterSplit;
    if (file != Split::kFile) return fmt::format("register rebalance assumes an SM of {} registers, not {}", Split::kFile, file);
    if (const int producer = producer_register_estimate(v); producer > Split::kProducer)
      return fmt::format("a rebalanced producer keeps {} registers, it needs about {}", Split::kProducer, producer);
    if (const int consumers = wm / 4, c = Split::consumer(consumers); v.register_estimate() > c)
      return fmt::format("needs about {} registers per consumer lane, more than the {} a rebalance gives {} consumer warpgroups",
                         v.register_estimate(), c, consumers);
    return std::nullopt;
  }

  std::optional<std::string> problem_rules(const Variant& v, const Problem& p) const override {
    return standard_problem_rules(v, p);
  }

 private:
  std::vector<Axis> axes_;
};

}  // namespace

const Family& wgmma_family() {
  static const WgmmaFamily family;
  return family;
}

}  // namespace ft
