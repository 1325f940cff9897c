#include "generator/family.hpp"

#include <algorithm>
#include <charconv>

#include <fmt/format.h>

#include "generator/families/families.hpp"
#include "generator/variant.hpp"

namespace ft {

std::string_view to_string(StageRole r) { return r == StageRole::stage1 ? "moe1" : "moe2"; }

std::optional<StageRole> parse_stage_role(std::string_view s) {
  if (s == "moe1") return StageRole::stage1;
  if (s == "moe2") return StageRole::stage2;
  return std::nullopt;
}

std::string_view to_string(Reduce r) {
  switch (r) {
    case Reduce::atomic: return "atomic";
    case Reduce::partials: return "partials";
    case Reduce::partials16: return "partials16";
    case Reduce::atomic_y: return "atomic_y";
    case Reduce::partials_y: return "partials_y";
  }
  return "?";
}

std::string_view to_string(WeightLayout l) {
  switch (l) {
    case WeightLayout::plain: return "plain";
    case WeightLayout::shuffled: return "shuffled";
    case WeightLayout::tiled: return "tiled";
    case WeightLayout::mapped: return "mapped";
  }
  return "?";
}

const std::vector<AxisValue>& Axis::preset(Preset p) const {
  switch (p) {
    case Preset::wide: return wide.empty() ? defaults : wide;
    case Preset::small: return small.empty() ? defaults : small;
    case Preset::default_: break;
  }
  return defaults;
}

std::string Axis::format(AxisValue v) const {
  switch (type) {
    case AxisType::integer: return std::to_string(v);
    case AxisType::pair: return fmt::format("{}x{}", pair_first(v), pair_second(v));
    case AxisType::boolean:
    case AxisType::choice:
      return std::size_t(v) < names.size() ? std::string(names[std::size_t(v)]) : std::to_string(v);
    case AxisType::atom: {
      const auto atoms = all_atoms();
      return std::size_t(v) < atoms.size() ? std::string(atoms[std::size_t(v)].id) : std::to_string(v);
    }
  }
  return "?";
}

namespace {

Result<int> positive_int(std::string_view s, std::string_view axis, int least = 1) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || v < least || v > 0xffff)
    return fail(Errc::invalid_input, least == 1 ? fmt::format("--space: '{}' is not a positive integer for {}", shorten(s), axis)
                                                : fmt::format("--space: '{}' is not an integer >= {} for {}", shorten(s), least, axis));
  return v;
}

// "a, b or c" for messages.
std::string one_of(const std::vector<std::string_view>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i) out += i + 1 == names.size() ? " or " : ", ";
    out += names[i];
  }
  return out;
}

}  // namespace

Result<AxisValue> Axis::parse(std::string_view text) const {
  switch (type) {
    case AxisType::integer: return positive_int(text, spelling, least);
    case AxisType::pair: {
      auto bad = [&] { return fail(Errc::invalid_input, fmt::format("--space: {} '{}' is not MxN, e.g. 2x2", spelling, shorten(text))); };
      const auto x = text.find('x');
      if (x == std::string_view::npos) return bad();
      auto a = positive_int(text.substr(0, x), spelling);
      auto b = positive_int(text.substr(x + 1), spelling);
      if (!a || !b) return bad();
      return pack_pair(*a, *b);
    }
    case AxisType::boolean:
    case AxisType::choice:
      for (std::size_t i = 0; i < names.size(); ++i)
        if (names[i] == text) return AxisValue(i);
      return fail(Errc::invalid_input, fmt::format("--space: {} '{}' is not {}", spelling, shorten(text), one_of(names)));
    case AxisType::atom: {
      const AtomInfo* a = find_atom(text);
      if (!a) return fail(Errc::invalid_input, fmt::format("--space: unknown atom '{}'", shorten(text)));
      return AxisValue(a - all_atoms().data());
    }
  }
  return fail(Errc::internal, "axis of no type");
}

std::size_t Family::index_of(std::string_view key) const {
  const auto ax = axes();
  for (std::size_t i = 0; i < ax.size(); ++i)
    if (ax[i].key == key || (ax[i].type == AxisType::pair && (ax[i].pair_keys[0] == key || ax[i].pair_keys[1] == key)))
      return i;
  return ax.size();
}

std::string_view Family::kernel_template(StageRole role) const {
  return role == StageRole::stage1 ? "ft::Stage1<Config>" : "ft::Stage2<Config>";
}

int Family::threads(const Variant& v) const {
  return (v.get("warps_m") * v.get("warps_n") + (v.get("warp_specialized") ? 4 : 0)) * v.atom()->lanes;
}

LaunchShape Family::launch(const Variant& v, const Problem& p, long long padded_rows) const {
  LaunchShape s;
  s.grid_x = int(padded_rows / v.get("tile_m"));
  s.grid_y = (v.role == StageRole::stage1 ? p.inter : p.hidden) / v.get("tile_n");
  s.grid_z = v.role == StageRole::stage2 ? v.get("split_k") : 1;
  if (const int per_block = v.get("tiles_per_block"); per_block > 1) {
    // Persistent: each block walks tiles block, block + grid_x, ... (ft::for_each_tile).
    const long long tiles = (long long)s.grid_x * s.grid_y * s.grid_z;
    s.grid_x = int((tiles + per_block - 1) / per_block);
    s.grid_y = s.grid_z = 1;
  }
  s.block = v.threads();
  s.lds_bytes = v.lds_bytes();
  return s;
}

StageContract Family::contract(const Variant& v) const {
  StageContract c;
  c.rows_per_tile = v.get("tile_m");
  c.weights = WeightLayout(v.get("layout"));
  c.output = Reduce(v.get("reduce"));
  c.weight_in_stage1 = v.get("weight_in_stage1") != 0;
  c.tile_tickets = v.has("dynamic_tiles") && v.get("dynamic_tiles") != 0;
  return c;
}

std::span<const Family* const> all_families() {
  static const Family* const registry[] = {&tiled_family(), &wgmma_family(), &onelaunch_family()};
  return registry;
}

const Family* find_family(std::string_view id) {
  for (const Family* f : all_families())
    if (f->id() == id) return f;
  return nullptr;
}

const Family* family_of(const AtomInfo& atom) {
  for (const Family* f : all_families())
    if (f->takes(atom)) return f;
  return nullptr;
}

std::optional<std::string> standard_problem_rules(const Variant& v, const Problem& p) {
  auto divides = [](long long a, long long b) { return b > 0 && a % b == 0; };
  if (fp8::scales(v) != p.scales)
    return fmt::format("the variant's scales are {}, the problem's {}", to_string(fp8::scales(v)), to_string(p.scales));
  const int tn = v.get("tile_n"), tk = v.get("tile_k");
  if (v.role == StageRole::stage1) {
    if (v.get("split_k") != 1) return std::string("split-K applies to stage 2 only");
    if (!divides(p.hidden, tk)) return fmt::format("hidden {} is not a multiple of tile_k {}", p.hidden, tk);
    if (!divides(p.inter, tn)) return fmt::format("inter {} is not a multiple of tile_n {}", p.inter, tn);
    return std::nullopt;
  }
  const int sk = v.get("split_k");
  if (sk > 1 && sums_of(Reduce(v.get("reduce"))) != Reduce::atomic) return std::string("split-K needs atomic reduction");
  if (writes_y(Reduce(v.get("reduce"))) && p.hidden % kDirectYColumns != 0)
    return fmt::format("stage 2 writing Y counts arrivals per {} columns: hidden {} is not a multiple", kDirectYColumns, p.hidden);
  if (!divides(p.inter, (long long)tk * sk))
    return fmt::format("inter {} is not a multiple of tile_k {} x split_k {}", p.inter, tk, sk);
  if (!divides(p.hidden, tn)) return fmt::format("hidden {} is not a multiple of tile_n {}", p.hidden, tn);
  return std::nullopt;
}

}  // namespace ft
