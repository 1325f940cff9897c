#include "generator/space.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

namespace ft {
namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    auto pos = s.find(sep);
    out.push_back(s.substr(0, pos));
    if (pos == std::string_view::npos) break;
    s.remove_prefix(pos + 1);
  }
  return out;
}

Result<int> to_int(std::string_view s, std::string_view axis) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v <= 0)
    return fail(Errc::invalid_input, fmt::format("--space: '{}' is not a positive integer for {}", s, axis));
  return v;
}

template <class T, class ParseOne>
Status parse_list(std::string_view values, std::string_view axis, std::vector<T>& out, ParseOne parse_one) {
  out.clear();
  for (auto v : split(values, ',')) {
    auto r = parse_one(v);
    if (!r) return std::unexpected(r.error());
    out.push_back(*r);
  }
  if (out.empty()) return fail(Errc::invalid_input, fmt::format("--space: no values for {}", axis));
  return {};
}

bool divides(long long a, long long b) { return b > 0 && a % b == 0; }

// The shape rules of ft::WgmmaGemm (templates/ft/wgmma_gemm.hpp).
std::optional<std::string> why_illegal_wgmma(const Variant& v) {
  if (v.warps_n != 1 || v.warps_m % 4 != 0 || v.warps_m > 12)
    return fmt::format("wgmma needs 4x1, 8x1 or 12x1 warps (one to three warpgroups along M), not {}x{}", v.warps_m, v.warps_n);
  const int groups = v.warps_m / 4;
  if (v.tile_m % (groups * v.atom->m) != 0)
    return fmt::format("tile_m {} does not give each of {} warpgroups whole {}-row wgmma blocks", v.tile_m, groups, v.atom->m);
  const int n = v.weight_matrices() * v.tile_n;
  if (n != 32 && n != 64 && n != 128 && n != 256)
    return fmt::format("wgmma N = {} weight matrices x tile_n {} = {} is not 32, 64, 128 or 256", v.weight_matrices(), v.tile_n, n);
  if (v.tile_k != 64) return fmt::format("wgmma k-tiles are 64 deep (one 128-byte swizzle row), not {}", v.tile_k);
  if (v.stages < 3) return fmt::format("the wgmma ring needs at least 3 stages, not {}", v.stages);
  const WeightLayoutKind wanted = v.warp_specialized ? WeightLayoutKind::tiled : WeightLayoutKind::plain;
  if (v.layout != wanted)
    return fmt::format("wgmma {} reads {} weights, not {} ones", v.warp_specialized ? "with a producer warpgroup" : "without a producer warpgroup",
                       to_string(wanted), to_string(v.layout));
  // The shared ring: every thread copies the same number of 16-byte chunks,
  // each in one swizzle phase (rows 8 apart).
  if (!v.warp_specialized) {
    const int chunks = (v.tile_m + n) * 8;
    if (chunks % v.threads() != 0 || v.threads() / 8 % 8 != 0)
      return fmt::format("{} rows of 16-byte chunks do not split evenly over {} threads", v.tile_m + n, v.threads());
  }
  // One block must fit the register file at the registers each thread needs
  // (the producer warpgroup of a specialised block gets as many as the others:
  // ptxas allocates one count for the whole kernel).
  const Target& t = *v.target;
  const int file = t.regs_file_per_simd * t.wave_size * t.simds_per_cu;
  if (v.register_estimate() * v.threads() > file)
    return fmt::format("needs about {} registers per thread x {} threads, more than the {} of an SM", v.register_estimate(),
                       v.threads(), file);
  return std::nullopt;
}

}  // namespace

SpaceOptions SpaceOptions::wide() {
  SpaceOptions o;
  o.tile_m = {16, 32, 64, 128, 256};
  o.tile_n = {32, 64, 128, 256};
  o.tile_k = {32, 64, 128};
  o.warps = {{1, 2}, {2, 1}, {1, 4}, {2, 2}, {4, 1}, {2, 4}, {4, 2}};
  o.stages = {1, 2};
  o.split_k = {1, 2, 4};
  o.weight_in_stage1 = {false, true};
  o.reduce = {Reduction::atomic, Reduction::partials};
  o.layout = {WeightLayoutKind::plain, WeightLayoutKind::shuffled};
  o.wgmma_tile_m = {64, 128, 192, 256};
  o.wgmma_tile_n = {32, 64, 128, 256};
  o.wgmma_stages = {3, 4, 5, 7};
  o.wgmma_producer = {false, true};
  o.wgmma_tiles = {1, 4, 8};
  return o;
}

SpaceOptions SpaceOptions::small() {
  SpaceOptions o;
  o.tile_m = {32, 64};
  o.tile_n = {64};
  o.tile_k = {32};
  o.warps = {{2, 2}};
  o.wgmma_tile_m = {64};
  o.wgmma_tile_n = {64};
  o.wgmma_warps = {{4, 1}};
  return o;
}

Result<SpaceOptions> SpaceOptions::parse(std::string_view text) {
  SpaceOptions o;
  for (auto part : split(text, ';')) {
    if (part.empty() || part == "default") continue;
    if (part == "wide") {
      o = wide();
      continue;
    }
    if (part == "small") {
      o = small();
      continue;
    }
    auto eq = part.find('=');
    if (eq == std::string_view::npos)
      return fail(Errc::invalid_input,
                  fmt::format("--space: '{}' is neither a preset (default, wide, small) nor axis=values", part));
    std::string_view axis = part.substr(0, eq), values = part.substr(eq + 1);
    auto int_of = [axis](std::string_view v) { return to_int(v, axis); };
    Status st;
    if (axis == "tile_m") st = parse_list(values, axis, o.tile_m, int_of);
    else if (axis == "tile_n") st = parse_list(values, axis, o.tile_n, int_of);
    else if (axis == "tile_k") st = parse_list(values, axis, o.tile_k, int_of);
    else if (axis == "stages") st = parse_list(values, axis, o.stages, int_of);
    else if (axis == "split_k") st = parse_list(values, axis, o.split_k, int_of);
    else if (axis == "atom")
      st = parse_list(values, axis, o.atoms, [](std::string_view v) -> Result<std::string> {
        if (!find_atom(v)) return fail(Errc::invalid_input, fmt::format("--space: unknown atom '{}'", v));
        return std::string(v);
      });
    else if (axis == "kind")
      st = parse_list(values, axis, o.kinds, [](std::string_view v) -> Result<KernelKind> {
        if (v == "moe1") return KernelKind::moe1;
        if (v == "moe2") return KernelKind::moe2;
        return fail(Errc::invalid_input, fmt::format("--space: kind '{}' is not moe1 or moe2", v));
      });
    else if (axis == "wgmma_tile_m") st = parse_list(values, axis, o.wgmma_tile_m, int_of);
    else if (axis == "wgmma_tile_n") st = parse_list(values, axis, o.wgmma_tile_n, int_of);
    else if (axis == "wgmma_stages") st = parse_list(values, axis, o.wgmma_stages, int_of);
    else if (axis == "wgmma_tiles") st = parse_list(values, axis, o.wgmma_tiles, int_of);
    else if (axis == "wgmma_producer")
      st = parse_list(values, axis, o.wgmma_producer, [](std::string_view v) -> Result<bool> {
        if (v == "on") return true;
        if (v == "off") return false;
        return fail(Errc::invalid_input, fmt::format("--space: wgmma_producer '{}' is not on or off", v));
      });
    else if (axis == "warps" || axis == "wgmma_warps")
      st = parse_list(values, axis, axis == "warps" ? o.warps : o.wgmma_warps, [](std::string_view v) -> Result<std::pair<int, int>> {
        auto x = v.find('x');
        if (x == std::string_view::npos) return fail(Errc::invalid_input, fmt::format("--space: warps '{}' is not MxN, e.g. 2x2", v));
        auto m = to_int(v.substr(0, x), "warps");
        auto n = to_int(v.substr(x + 1), "warps");
        if (!m || !n) return fail(Errc::invalid_input, fmt::format("--space: warps '{}' is not MxN, e.g. 2x2", v));
        return std::pair{*m, *n};
      });
    else if (axis == "weight")
      st = parse_list(values, axis, o.weight_in_stage1, [](std::string_view v) -> Result<bool> {
        if (v == "stage1") return true;
        if (v == "stage2") return false;
        return fail(Errc::invalid_input, fmt::format("--space: weight '{}' is not stage1 or stage2", v));
      });
    else if (axis == "reduce")
      st = parse_list(values, axis, o.reduce, [](std::string_view v) -> Result<Reduction> {
        if (v == "atomic") return Reduction::atomic;
        if (v == "partials") return Reduction::partials;
        return fail(Errc::invalid_input, fmt::format("--space: reduce '{}' is not atomic or partials", v));
      });
    else if (axis == "layout")
      st = parse_list(values, axis, o.layout, [](std::string_view v) -> Result<WeightLayoutKind> {
        if (v == "plain") return WeightLayoutKind::plain;
        if (v == "shuffled") return WeightLayoutKind::shuffled;
        if (v == "tiled") return WeightLayoutKind::tiled;
        return fail(Errc::invalid_input, fmt::format("--space: layout '{}' is not plain, shuffled or tiled", v));
      });
    else
      return fail(Errc::invalid_input,
                  fmt::format("--space: unknown axis '{}'; axes: kind, atom, tile_m, tile_n, tile_k, warps, stages, "
                              "split_k, weight, reduce, layout, wgmma_tile_m, wgmma_tile_n, wgmma_warps, wgmma_stages, wgmma_producer, wgmma_tiles",
                              axis));
    if (!st) return std::unexpected(st.error());
  }
  return o;
}

std::optional<std::string> why_illegal(const Variant& v, const Problem& p) {
  const Target& t = *v.target;
  const AtomInfo& a = *v.atom;
  if (!a.available_on(t.name)) return fmt::format("atom {} does not exist on {}", a.id, t.name);
  if (a.dtype != v.dtype) return fmt::format("atom {} takes {}, the variant is {}", a.id, to_string(a.dtype), to_string(v.dtype));
  if (a.lanes != t.wave_size) return fmt::format("atom {} needs {}-lane waves, {} has {}", a.id, a.lanes, t.name, t.wave_size);
  if (v.tiles_per_block < 1) return fmt::format("tiles per block {} is not positive", v.tiles_per_block);
  if (v.tiles_per_block > 1 && !v.warp_specialized)
    return fmt::format("{} tiles per block need a producer warpgroup (a persistent block's ring runs across tiles)",
                       v.tiles_per_block);
  if (a.warpgroup()) {
    if (auto why = why_illegal_wgmma(v)) return why;
  } else if (v.warp_specialized)
    return fmt::format("warp specialisation is a wgmma-family option; atom {} is not a wgmma", a.id);
  else if (v.layout == WeightLayoutKind::tiled)
    return fmt::format("the tiled weight layout feeds wgmma bulk copies; atom {} is not a wgmma", a.id);
  else if (v.tile_m % (v.warps_m * a.m) != 0)
    return fmt::format("tile_m {} is not a multiple of warps_m {} x atom M {}", v.tile_m, v.warps_m, a.m);
  else if (v.tile_n % (v.warps_n * a.n) != 0)
    return fmt::format("tile_n {} is not a multiple of warps_n {} x atom N {}", v.tile_n, v.warps_n, a.n);
  else if (v.tile_k % a.k != 0 || v.tile_k % 8 != 0)
    return fmt::format("tile_k {} is not a multiple of atom K {} and of 8", v.tile_k, a.k);
  else if (v.stages != 1 && v.stages != 2)
    return fmt::format("stages {} is not 1 (single) or 2 (ping-pong)", v.stages);
  if (v.threads() > t.max_block_threads)
    return fmt::format("{} threads per block exceed {}", v.threads(), t.max_block_threads);
  if (v.lds_bytes() > t.lds_bytes) return fmt::format("LDS use {} bytes exceeds {}", v.lds_bytes(), t.lds_bytes);
  if (int regs = v.register_estimate(); regs > t.regs_per_lane)
    return fmt::format("needs about {} registers per lane, {} allows {}", regs, t.name, t.regs_per_lane);
  if (v.kind == KernelKind::moe1) {
    if (v.split_k != 1) return std::string("split-K applies to stage 2 only");
    if (!divides(p.hidden, v.tile_k)) return fmt::format("hidden {} is not a multiple of tile_k {}", p.hidden, v.tile_k);
    if (!divides(p.inter, v.tile_n)) return fmt::format("inter {} is not a multiple of tile_n {}", p.inter, v.tile_n);
  } else {
    if (v.split_k > 1 && v.reduce != Reduction::atomic) return std::string("split-K needs atomic reduction");
    if (!divides(p.inter, (long long)v.tile_k * v.split_k))
      return fmt::format("inter {} is not a multiple of tile_k {} x split_k {}", p.inter, v.tile_k, v.split_k);
    if (!divides(p.hidden, v.tile_n)) return fmt::format("hidden {} is not a multiple of tile_n {}", p.hidden, v.tile_n);
  }
  return std::nullopt;
}

Space enumerate_space(const Target& target, const Problem& problem, const SpaceOptions& o) {
  Space space;
  std::vector<const AtomInfo*> atoms;
  if (o.atoms.empty()) {
    atoms = atoms_for(target, problem.dtype);
  } else {
    for (const auto& id : o.atoms) atoms.push_back(find_atom(id));
  }
  // The wgmma family's weight layout is not an axis: it follows the producer
  // warpgroup (bulk copies need tiled weights, the shared ring reads plain);
  // only producer blocks may take several tiles.
  const std::vector<WeightLayoutKind> plain_only{WeightLayoutKind::plain}, tiled_only{WeightLayoutKind::tiled};
  const std::vector<int> one_tile{1};
  auto layouts_for = [&](const AtomInfo* atom, bool ws) -> const std::vector<WeightLayoutKind>& {
    return !atom->warpgroup() ? o.layout : ws ? tiled_only : plain_only;
  };
  auto tiles_for = [&](bool ws) -> const std::vector<int>& { return ws ? o.wgmma_tiles : one_tile; };
  // The shape axes of an atom's family: the wgmma family has its own (tile_k
  // is always one 64-deep swizzle row; only it has a producer warpgroup).
  struct ShapeAxes {
    const std::vector<int>& tile_m;
    const std::vector<int>& tile_n;
    std::vector<int> tile_k;
    const std::vector<std::pair<int, int>>& warps;
    const std::vector<int>& stages;
    std::vector<bool> producer;
  };
  const ShapeAxes wave_axes{o.tile_m, o.tile_n, o.tile_k, o.warps, o.stages, {false}};
  const ShapeAxes wgmma_axes{o.wgmma_tile_m, o.wgmma_tile_n, {64}, o.wgmma_warps, o.wgmma_stages, o.wgmma_producer};
  for (KernelKind kind : o.kinds) {
    // Stage-2-only axes collapse to one value for stage 1.
    const std::vector<int> splits = kind == KernelKind::moe2 ? o.split_k : std::vector<int>{1};
    const std::vector<Reduction> reduces = kind == KernelKind::moe2 ? o.reduce : std::vector<Reduction>{Reduction::atomic};
    for (const AtomInfo* atom : atoms) {
      const ShapeAxes& ax = atom->warpgroup() ? wgmma_axes : wave_axes;
      for (int tm : ax.tile_m)
        for (int tn : ax.tile_n)
          for (int tk : ax.tile_k)
            for (auto [wm, wn] : ax.warps)
              for (int st : ax.stages)
                for (bool ws : ax.producer)
                  for (int tpb : tiles_for(ws))
                    for (bool w1 : o.weight_in_stage1)
                      for (WeightLayoutKind layout : layouts_for(atom, ws))
                        for (int sk : splits)
                          for (Reduction red : reduces) {
                            Variant v;
                            v.target = &target;
                            v.kind = kind;
                            v.dtype = problem.dtype;
                            v.atom = atom;
                            v.tile_m = tm;
                            v.tile_n = tn;
                            v.tile_k = tk;
                            v.warps_m = wm;
                            v.warps_n = wn;
                            v.stages = st;
                            v.warp_specialized = ws;
                            v.tiles_per_block = tpb;
                            v.split_k = sk;
                            v.weight_in_stage1 = w1;
                            v.reduce = red;
                            v.layout = layout;
                            if (auto why = why_illegal(v, problem)) space.rejected.push_back({v, *why});
                            else space.legal.push_back(v);
                          }
    }
  }
  return space;
}

Result<Variant> default_variant(const Target& target, const Problem& problem, KernelKind kind) {
  auto atoms = atoms_for(target, problem.dtype);
  if (atoms.empty())
    return fail(Errc::invalid_input, fmt::format("no matrix atom for {} on {}", to_string(problem.dtype), target.name));
  Variant v;
  v.target = &target;
  v.kind = kind;
  v.dtype = problem.dtype;
  v.atom = atoms.front();
  v.tile_m = 64;
  v.tile_n = 64;
  v.tile_k = 32;
  v.warps_m = 2;
  v.warps_n = 2;
  v.stages = 2;
  if (auto why = why_illegal(v, problem))
    return fail(Errc::invalid_input, "the default variant does not fit: " + *why, v.name());
  return v;
}

}  // namespace ft
