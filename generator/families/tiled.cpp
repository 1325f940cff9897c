// The tiled family: wave-level GEMM over one mfma (AMD) or mma.sync (NVIDIA)
// atom per instruction, A and weight tiles staged in LDS with one 16-byte pad
// per row, single or ping-pong buffers (templates/ft/tiled_gemm.hpp).
#include <algorithm>

#include <fmt/format.h>

#include "generator/families/families.hpp"
#include "generator/variant.hpp"

namespace ft {
namespace {

using axes::Values;

class TiledFamily final : public Family {
 public:
  TiledFamily() {
    // Enumeration order; the standard tokens put the name in its own order.
    axes_.push_back(axes::atom());
    axes_.push_back(axes::tile_m("tile_m", Values{{16, 32, 64, 128}, {16, 32, 64, 128, 256}, {32, 64}}, 64));
    axes_.push_back(axes::tile_n("tile_n", Values{{64, 128}, {32, 64, 128, 256}, {64}}, 128));
    axes_.push_back(axes::tile_k("tile_k", Values{{32, 64}, {32, 64, 128}, {32}}, 64));
    axes_.push_back(axes::warps("warps",
                                Values{{pack_pair(1, 4), pack_pair(2, 2)},
                                       {pack_pair(1, 2), pack_pair(2, 1), pack_pair(1, 4), pack_pair(2, 2), pack_pair(4, 1),
                                        pack_pair(2, 4), pack_pair(4, 2)},
                                       {pack_pair(2, 2)}},
                                pack_pair(2, 2)));
    axes_.push_back(axes::stages("stages", Values{{2}, {1, 2}}, 2));  // LDS buffers: 1 single, 2 ping-pong
    // Not axes of this family (no producer warpgroup, one tile per block), but
    // members of every Config the shared templates read.
    axes_.push_back(axes::warp_specialized("", Values{{0}}));
    axes_.push_back(axes::tiles_per_block("", Values{{1}}));
    axes_.push_back(axes::weight_in_stage1(Values{{0}, {0, 1}}));
    axes_.push_back(axes::layout("layout", Values{{int(WeightLayout::plain)},
                                                  {int(WeightLayout::plain), int(WeightLayout::shuffled)}}));
    axes_.push_back(axes::split_k(Values{{1, 4}, {1, 2, 4}}));
    axes_.push_back(axes::reduce(Values{{int(Reduce::atomic)},
                                        {int(Reduce::atomic), int(Reduce::partials), int(Reduce::partials16), int(Reduce::atomic_y),
                                         int(Reduce::partials_y)}}));
    // fp8 only (the e4m3 MFMA and mma.sync atoms): the layer's scales and stage 1's quantise-on-store.
    axes_.push_back(axes::scales());
    axes_.push_back(axes::inter_store(Values{{int(InterStore::bf16), int(InterStore::fp8)}}));
  }

  std::string_view id() const override { return "tiled"; }
  bool takes(const AtomInfo& a) const override { return a.family == "mfma" || a.family == "mma.sync"; }
  std::span<const Axis> axes() const override { return axes_; }
  // ft::TiledGemm::kSmemBytes: rows of A then of each weight matrix, each
  // tile_k wide plus one 16-byte pad, per LDS stage (in the operand's bytes);
  // quantise-on-store stages its tile in the same memory afterwards.
  int lds_bytes(const Variant& v) const override {
    const int rows = v.get("tile_m") + v.weight_matrices() * v.get("tile_n");
    const int es = v.atom()->operand_bytes();
    return std::max(v.get("stages") * rows * (v.get("tile_k") + 16 / es) * es, fp8::staged_bytes(v));
  }

  int register_estimate(const Variant& v) const override { return tiled_registers(v, v.get("tile_n"), v.weight_matrices()); }

  std::optional<std::string> shape_rules(const Variant& v) const override {
    const AtomInfo& a = *v.atom();
    if (v.get("warp_specialized"))
      return fmt::format("warp specialisation is a wgmma-family option; atom {} is not a wgmma", a.id);
    if (const auto l = WeightLayout(v.get("layout")); l == WeightLayout::tiled || l == WeightLayout::mapped)
      return fmt::format("the {} weight layout feeds a wgmma producer warpgroup; atom {} is not a wgmma", to_string(l), a.id);
    const int tm = v.get("tile_m"), tn = v.get("tile_n"), tk = v.get("tile_k"), wm = v.get("warps_m"), wn = v.get("warps_n");
    if (tm % (wm * a.m) != 0) return fmt::format("tile_m {} is not a multiple of warps_m {} x atom M {}", tm, wm, a.m);
    if (tn % (wn * a.n) != 0) return fmt::format("tile_n {} is not a multiple of warps_n {} x atom N {}", tn, wn, a.n);
    if (tk % a.k != 0 || tk % 8 != 0) return fmt::format("tile_k {} is not a multiple of atom K {} and of 8", tk, a.k);
    if (tk * a.operand_bytes() % 16 != 0)
      return fmt::format("tile_k {} of 1-byte values is not a whole number of 16-byte chunks", tk);
    if (const int st = v.get("stages"); st != 1 && st != 2)
      return fmt::format("stages {} is not 1 (single) or 2 (ping-pong)", st);
    return fp8::shape_rules(v);
  }

  std::optional<std::string> problem_rules(const Variant& v, const Problem& p) const override {
    return standard_problem_rules(v, p);
  }

 private:
  std::vector<Axis> axes_;
};

}  // namespace

int tiled_registers(const Variant& v, int tn, int weight_matrices) {
  const AtomInfo& a = *v.atom();
  const int tm = v.get("tile_m"), tk = v.get("tile_k"), threads = v.threads();
  const int rm = tm / v.get("warps_m") / a.m, rn = tn / v.get("warps_n") / a.n;
  // A promoting GEMM (fp8) keeps a second set: the promoted sums.
  const int acc = weight_matrices * rm * rn * a.c_regs() * (fp8::promotes(v) ? 2 : 1);
  const int frags = rm * a.a_registers() + rn * a.b_registers();  // operand registers (packed 16- or 8-bit values)
  const int chunks = ((tm + weight_matrices * tn) * tk / (16 / a.operand_bytes()) + threads - 1) / threads;
  const int staged = v.get("stages") == 2 ? chunks * 4 : 0;
  const int addressing = chunks * 3 + 24;  // row pointers, strides, indices
  return acc + frags + staged + addressing;
}

const Family& tiled_family() {
  static const TiledFamily family;
  return family;
}

}  // namespace ft
