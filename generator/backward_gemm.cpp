#include "generator/backward_gemm.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ft {
namespace {

using Rule = std::optional<std::string> (*)(const BackwardVariant&);

// The rule table: every row must pass, in this order (the first failing row's line is the reason).
const std::array<Rule, 10> kRules{
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (!v.target || !v.atom) return "a K-grouped configuration needs a target and an atom";
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (!v.atom->warpgroup() && v.atom->family != "mfma" && v.atom->family != "mma.sync")
        return fmt::format("atom {} is not an mfma, mma.sync or wgmma atom", v.atom->id);
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (!v.atom->available_on(v.target->name)) return fmt::format("atom {} does not exist on {}", v.atom->id, v.target->name);
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (v.atom->dtype != DType::bf16 && v.atom->dtype != DType::f16)
        return fmt::format("atom {} is not 16-bit: weight gradients are bf16 or f16 GEMMs", v.atom->id);
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (v.tile_m < 8 || v.tile_n < 8 || v.tile_k < 8 || v.warps_m < 1 || v.warps_n < 1)
        return fmt::format("tiles {}x{}x{} and warps {}x{} must be positive (tiles at least 8)", v.tile_m, v.tile_n, v.tile_k,
                           v.warps_m, v.warps_n);
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      const AtomInfo& a = *v.atom;
      if (a.warpgroup()) return std::nullopt;  // its shape rules are the next row's
      if (v.tile_m % (v.warps_m * a.m) != 0)
        return fmt::format("tile_m {} is not a multiple of warps_m {} x atom M {}", v.tile_m, v.warps_m, a.m);
      if (v.tile_n % (v.warps_n * a.n) != 0)
        return fmt::format("tile_n {} is not a multiple of warps_n {} x atom N {}", v.tile_n, v.warps_n, a.n);
      if (v.tile_k % a.k != 0) return fmt::format("tile_k {} is not a multiple of atom K {}", v.tile_k, a.k);
      if (v.tile_m % 8 != 0 || v.tile_n % 8 != 0 || v.tile_k % 8 != 0)
        return fmt::format("tiles {}x{}x{} are not whole 16-byte chunks of 8 values", v.tile_m, v.tile_n, v.tile_k);
      return std::nullopt;
    },
    // The wgmma forms (templates/ft/wgmma_staged.hpp: moe_kgrouped_wgmma.hpp,
    // moe_dgrad_wgmma.hpp): warpgroups stacked along M, each owning whole
    // 64-row blocks; one MN-major instruction covers the tile's N; k-slices of
    // whole k16 steps (the dgrad's K-major A: one 128-byte row, 64 deep);
    // every thread copies as many 16-byte chunks; a cp.async ring of three or more stages.
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (!v.atom->warpgroup()) return std::nullopt;
      if (v.warps_n != 1 || v.warps_m % 4 != 0)  // warps_m >= 1: the positivity row above
        return fmt::format("warps {}x{}: the wgmma form stacks whole warpgroups (4 warps) along M", v.warps_m, v.warps_n);
      if (v.tile_m % (v.warps_m / 4 * 64) != 0)
        return fmt::format("tile_m {} is not whole 64-row blocks for each of {} warpgroups", v.tile_m, v.warps_m / 4);
      if (v.tile_n != 64 && v.tile_n != 128 && v.tile_n != 256) return fmt::format("tile_n {} is not 64, 128 or 256", v.tile_n);
      if (v.tile_k % 16 != 0) return fmt::format("tile_k {} is not a multiple of the atom's K 16", v.tile_k);
      if (v.op != BackwardOp::wgrad && v.tile_k != 64)
        return fmt::format("tile_k {} is not 64: the dgrad's gathered A is K-major, one 128-byte row per tile row", v.tile_k);
      if (v.tile_k * (v.tile_m + v.tile_n) / 8 % v.threads() != 0)
        return fmt::format("{} chunks per k-slice do not split evenly over {} threads", v.tile_k * (v.tile_m + v.tile_n) / 8,
                           v.threads());
      if (v.stages < 3 || v.stages > 8) return fmt::format("stages {} is not 3 to 8 (a cp.async ring)", v.stages);
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (v.atom->warpgroup()) return std::nullopt;
      if (v.stages != 1 && v.stages != 2) return fmt::format("stages {} is not 1 (single) or 2 (ping-pong)", v.stages);
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (v.threads() > v.target->max_block_threads)
        return fmt::format("{} threads per block exceed {}", v.threads(), v.target->max_block_threads);
      if (v.lds_bytes() > v.target->lds_bytes) return fmt::format("LDS use {} bytes exceeds {}", v.lds_bytes(), v.target->lds_bytes);
      return std::nullopt;
    },
    [](const BackwardVariant& v) -> std::optional<std::string> {
      if (v.register_estimate() > v.target->regs_per_lane)
        return fmt::format("an estimated {} registers per lane exceed {}", v.register_estimate(), v.target->regs_per_lane);
      return std::nullopt;
    },
};

struct PresetValues {
  std::vector<int> tile_m, tile_n, tile_k;
  std::vector<std::array<int, 2>> warps;
  std::vector<int> stages;
};

PresetValues values_of(Preset p, bool warpgroup) {
  if (warpgroup) {  // sm_90a's wgmma forms
    switch (p) {
      case Preset::small: return {{128}, {128}, {64}, {{8, 1}}, {4}};
      case Preset::wide: return {{64, 128, 256}, {64, 128, 256}, {32, 64}, {{4, 1}, {8, 1}}, {3, 4, 5}};
      case Preset::default_: break;
    }
    return {{128}, {128, 256}, {64}, {{4, 1}, {8, 1}}, {3, 4}};
  }
  switch (p) {
    case Preset::small: return {{64}, {64}, {32}, {{2, 2}}, {2}};
    case Preset::wide: return {{32, 64, 128}, {32, 64, 128}, {16, 32, 64}, {{1, 4}, {2, 2}, {4, 1}, {2, 4}, {4, 2}}, {1, 2}};
    case Preset::default_: break;
  }
  return {{64, 128}, {64, 128}, {32, 64}, {{2, 2}, {1, 4}}, {2}};
}

}  // namespace

std::string_view to_string(BackwardOp op) {
  switch (op) {
    case BackwardOp::dgrad_swiglu: return "dgrad2";
    case BackwardOp::dgrad_scatter: return "dgrad1";
    case BackwardOp::wgrad: break;
  }
  return "kgrouped";
}

std::optional<BackwardOp> parse_backward_op(std::string_view s) {
  for (BackwardOp op : {BackwardOp::wgrad, BackwardOp::dgrad_swiglu, BackwardOp::dgrad_scatter})
    if (to_string(op) == s) return op;
  return std::nullopt;
}

std::string BackwardVariant::name() const {
  return fmt::format("ft_{}_{}_{}_m{}n{}k{}_w{}x{}_{}_s{}", target->name, to_string(op), to_string(atom->dtype), tile_m, tile_n,
                     tile_k, warps_m, warps_n, atom->short_name(), stages);
}

nlohmann::json BackwardVariant::to_json() const {
  return {{"op", to_string(op)},   {"atom", atom->id},       {"tile_m", tile_m},       {"tile_n", tile_n},
          {"tile_k", tile_k},      {"warps_m", warps_m},     {"warps_n", warps_n},     {"stages", stages}};
}

Result<BackwardVariant> BackwardVariant::from_json(const nlohmann::json& j, const Target& target) {
  const auto bad = [](const std::string& why) { return fail(Errc::invalid_input, "backward configuration: " + why); };
  if (!j.is_object()) return bad("not a JSON object");
  BackwardVariant v;
  v.target = &target;
  const std::pair<const char*, int*> ints[] = {{"tile_m", &v.tile_m}, {"tile_n", &v.tile_n},   {"tile_k", &v.tile_k},
                                               {"warps_m", &v.warps_m}, {"warps_n", &v.warps_n}, {"stages", &v.stages}};
  std::size_t known = 2;
  for (const auto& [key, out] : ints) {
    auto it = j.find(key);
    if (it == j.end()) return bad(fmt::format("\"{}\" is missing", key));
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 1 << 20)
      return bad(fmt::format("\"{}\" must be a non-negative integer", key));
    *out = it->get<int>();
    ++known;
  }
  auto text = [&](const char* key) -> Result<std::string> {
    auto it = j.find(key);
    if (it == j.end()) return bad(fmt::format("\"{}\" is missing", key));
    if (!it->is_string()) return bad(fmt::format("\"{}\" must be a string", key));
    return it->get<std::string>();
  };
  const std::string op = FT_TRY(text("op")), atom = FT_TRY(text("atom"));
  if (j.size() != known) return bad("a member that is not one of a configuration's");
  const auto parsed = parse_backward_op(op);
  if (!parsed) return bad(fmt::format("unknown op '{}' (kgrouped, dgrad2 or dgrad1)", shorten(op)));
  v.op = *parsed;
  v.atom = find_atom(atom);
  if (!v.atom) return bad(fmt::format("unknown atom '{}'", shorten(atom)));
  if (auto why = why_illegal(v)) return bad(fmt::format("{}: {}", v.name(), *why));
  return v;
}

int BackwardVariant::threads() const { return warps_m * warps_n * atom->lanes; }

// ft::TiledGemm::kSmemBytes with one weight matrix: rows of A^T then of B^T,
// tile_k wide plus a 16-byte pad, per LDS stage.
int BackwardVariant::lds_bytes() const {
  const int es = atom->operand_bytes();
  if (atom->warpgroup()) {
    const int ring = stages * (tile_m + tile_n) * tile_k * es + 1024;  // + room to align the ring to 1024
    // The K-grouped GEMM and the swiglu dgrad stage their fp32 C tile through the same
    // window, rows padded by 8 floats (moe_kgrouped_wgmma.hpp, moe_dgrad_wgmma.hpp: kPad).
    return op == BackwardOp::dgrad_scatter ? ring : std::max(ring, tile_m * (tile_n + 8) * 4);
  }
  return stages * (tile_m + tile_n) * (tile_k + 16 / es) * es;
}

int BackwardVariant::register_estimate() const {
  const AtomInfo& a = *atom;
  if (a.warpgroup()) {  // accumulators, then the chunks' row and pair (the addresses are recomputed)
    const int acc = tile_m / (warps_m / 4) / 64 * tile_n / 2;
    const int chunks = tile_k * (tile_m + tile_n) / 8 / threads();
    // The dgrad's chunks keep their gathered row pointers across the mainloop (ptxas
    // 13.0: m128n128 on one warpgroup, 128 accumulators, spills 60 bytes at 255).
    return op == BackwardOp::wgrad ? acc + 2 * chunks + 32 : acc + 6 * chunks + 48;
  }
  const int rm = tile_m / warps_m / a.m, rn = tile_n / warps_n / a.n;
  const int acc = rm * rn * a.c_regs();
  const int frags = rm * a.a_registers() + rn * a.b_registers();
  const int chunks = ((tile_m + tile_n) * tile_k / 8 + threads() - 1) / threads();
  return acc + frags + chunks * 4 + chunks * 3 + 24;  // staged chunks, addressing
}

std::optional<std::string> why_illegal(const BackwardVariant& v) {
  for (Rule r : kRules)
    if (auto why = r(v)) return why;
  return std::nullopt;
}

std::optional<std::string> why_illegal_for(const BackwardVariant& v, int m, int n) {
  if (auto why = why_illegal(v)) return why;
  if (v.op != BackwardOp::wgrad) {
    if (m <= 0 || m % v.tile_k != 0) return fmt::format("tile_k {} does not divide the reduction K = {}", v.tile_k, m);
  } else if (m <= 0 || m % v.tile_m != 0) {
    return fmt::format("tile_m {} does not divide m = {}", v.tile_m, m);
  }
  if (n <= 0 || n % v.tile_n != 0) return fmt::format("tile_n {} does not divide n = {}", v.tile_n, n);
  return std::nullopt;
}

std::optional<std::string> why_illegal_for(const BackwardVariant& v, const Problem& p) {
  if (v.atom && v.atom->dtype != p.dtype)
    return fmt::format("atom {} is {}, the problem {}", v.atom->id, to_string(v.atom->dtype), to_string(p.dtype));
  switch (v.op) {
    case BackwardOp::dgrad_swiglu: return why_illegal_for(v, p.hidden, p.inter);
    case BackwardOp::dgrad_scatter: return why_illegal_for(v, 2 * p.inter, p.hidden);
    case BackwardOp::wgrad: break;
  }
  if (auto why = why_illegal_for(v, p.hidden, p.inter)) return "dW2: " + *why;
  if (auto why = why_illegal_for(v, 2 * p.inter, p.hidden)) return "dW1: " + *why;
  return std::nullopt;
}

std::vector<BackwardVariant> backward_space(const Target& t, DType d, Preset preset, BackwardOp op) {
  std::vector<BackwardVariant> out;
  for (const AtomInfo* a : atoms_for(t, d)) {
    const PresetValues pv = values_of(preset, a->warpgroup());
    for (int tm : pv.tile_m)
      for (int tn : pv.tile_n)
        for (int tk : pv.tile_k)
          for (const auto& w : pv.warps)
            for (int s : pv.stages) {
              const BackwardVariant v{&t, a, tm, tn, tk, w[0], w[1], s, op};
              if (!why_illegal(v)) out.push_back(v);
            }
  }
  // Where a target has the wgmma form, its configurations come second, right
  // after the portable form's first: a search's base program takes each
  // role's first configuration (the portable form, verified on every target),
  // its --budget N a role's first N, and the wgmma ones are tried against that base.
  const auto portable = std::stable_partition(out.begin(), out.end(), [](const BackwardVariant& v) { return !v.atom->warpgroup(); });
  if (portable != out.begin() && portable != out.end()) std::rotate(out.begin() + 1, portable, out.end());
  return out;
}

LaunchShape kgrouped_launch(const BackwardVariant& v, int experts, int m, int n) {
  return LaunchShape{m / v.tile_m, n / v.tile_n, experts, v.threads(), v.lds_bytes()};
}

LaunchShape dgrad_launch(const BackwardVariant& v, long long max_padded_rows, int n) {
  return LaunchShape{int(max_padded_rows / v.tile_m), n / v.tile_n, 1, v.threads(), v.lds_bytes()};
}

namespace {

struct OpUnit {
  const char* what;     // the unit's second comment line
  const char* header;   // the template
  const char* kernel;   // the instantiation
  const char* epilogue; // a Config line, or ""
  const char* args;     // the argument struct
};

OpUnit unit_of(BackwardOp op, bool warpgroup) {
  if (op == BackwardOp::wgrad && warpgroup)
    return {"the K-grouped GEMM of the backward's\n// weight gradients on warpgroups (templates/ft/moe_kgrouped_wgmma.hpp)",
            "ft/moe_kgrouped_wgmma.hpp", "ft::KGroupedWgmma<Config>", "", "ft::KGroupedArgs"};
  const char* header = warpgroup ? "ft/moe_dgrad_wgmma.hpp" : "ft/moe_dgrad.hpp";
  const char* kernel = warpgroup ? "ft::RoutedDgradWgmma<Config>" : "ft::RoutedDgrad<Config>";
  switch (op) {
    case BackwardOp::dgrad_swiglu:
      return {warpgroup ? "the stage-2 backward (dInter = (w dY) W2_e, the SwiGLU\n// backward, d(topk_weights)) on warpgroups (templates/ft/moe_dgrad_wgmma.hpp)"
                        : "the stage-2 backward (dInter = (w dY) W2_e, the SwiGLU\n// backward, d(topk_weights); templates/ft/moe_dgrad.hpp)",
              header, kernel, "  static constexpr ft::DgradEpilogue epilogue = ft::DgradEpilogue::swiglu;\n", "ft::DgradArgs"};
    case BackwardOp::dgrad_scatter:
      return {warpgroup ? "the stage-1 backward (dX += dH W1_e, the top-k\n// scatter-add) on warpgroups (templates/ft/moe_dgrad_wgmma.hpp)"
                        : "the stage-1 backward (dX += dH W1_e, the top-k\n// scatter-add; templates/ft/moe_dgrad.hpp)",
              header, kernel, "  static constexpr ft::DgradEpilogue epilogue = ft::DgradEpilogue::scatter;\n", "ft::DgradArgs"};
    case BackwardOp::wgrad: break;
  }
  return {"the K-grouped GEMM of the backward's\n// weight gradients (templates/ft/moe_kgrouped.hpp)", "ft/moe_kgrouped.hpp",
          "ft::KGrouped<Config>", "", "ft::KGroupedArgs"};
}

}  // namespace

Result<KernelSource> emit_backward(const BackwardVariant& v) {
  if (auto why = why_illegal(v)) return fail(Errc::invalid_input, *why, v.target && v.atom ? v.name() : "kgrouped");
  const std::string name = v.name();
  const OpUnit u = unit_of(v.op, v.atom->warpgroup());
  std::string text = fmt::format(
      R"(// {name}
// Generated by flytune; do not edit. Instantiates {what} on {target}, {dtype}, atom {atom}.
#include "ft/kernels.hpp"
#include "ft/moe_backward_args.hpp"
#include "{header}"

namespace {{

struct Config {{
  using Atom = ft::atom::{atom};
  static constexpr ft::Elem elem = ft::Elem::{dtype};
  static constexpr int tile_m = {tm}, tile_n = {tn}, tile_k = {tk};
  static constexpr int warps_m = {wm}, warps_n = {wn};
  static constexpr int stages = {stages};
{epilogue}}};

using Kernel = {kernel};
static_assert(Kernel::kThreads == {threads}, "the generator and the templates disagree on the block size");
static_assert(Kernel::kSmemBytes == {lds}, "the generator and the templates disagree on LDS bytes");

}}  // namespace

FT_KERNEL({threads}, {name})({args} args) {{ Kernel::run(args); }}
)",
      fmt::arg("name", name), fmt::arg("target", v.target->name), fmt::arg("dtype", to_string(v.atom->dtype)),
      fmt::arg("atom", v.atom->id), fmt::arg("tm", v.tile_m), fmt::arg("tn", v.tile_n), fmt::arg("tk", v.tile_k),
      fmt::arg("wm", v.warps_m), fmt::arg("wn", v.warps_n), fmt::arg("stages", v.stages), fmt::arg("threads", v.threads()),
      fmt::arg("lds", v.lds_bytes()), fmt::arg("what", u.what), fmt::arg("header", u.header), fmt::arg("kernel", u.kernel),
      fmt::arg("epilogue", u.epilogue), fmt::arg("args", u.args));
  return KernelSource{name, std::move(text), {name}};
}

}  // namespace ft
