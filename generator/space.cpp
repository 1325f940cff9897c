#include "generator/space.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// The first axis any family spells `spelling`.
const Axis* axis_spelled(std::string_view spelling) {
  for (const Family* f : all_families())
    for (const Axis& a : f->axes())
      if (!a.spelling.empty() && a.spelling == spelling) return &a;
  return nullptr;
}

Status parse_roles(std::string_view values, std::vector<StageRole>& roles) {
  roles.clear();
  for (auto v : split(values, ',')) {
    const auto r = parse_stage_role(v);
    if (!r) return fail(Errc::invalid_input, fmt::format("--space: kind '{}' is not moe1 or moe2", shorten(v)));
    roles.push_back(*r);
  }
  return {};
}

// Every axis of the variant from index i on, in the family's order: the
// values the options give, or the one value an axis that does not apply takes.
void expand(Variant& v, std::size_t i, const SpaceOptions& o, const Problem& p, Space& out) {
  const auto ax = v.family->axes();
  if (i == ax.size()) {
    if (auto why = why_illegal(v, p)) out.rejected.push_back({v, *why});
    else out.legal.push_back(v);
    return;
  }
  const Axis& a = ax[i];
  if (a.type == AxisType::atom) return expand(v, i + 1, o, p, out);  // set by the caller
  if (!a.present_in(v) || (a.applies && !a.applies(v))) {
    v.values[i] = a.present_in(v) && a.inactive ? a.inactive(v) : a.initial;
    return expand(v, i + 1, o, p, out);
  }
  if (a.from_problem) {
    v.values[i] = a.from_problem(p);
    return expand(v, i + 1, o, p, out);
  }
  for (AxisValue x : o.values(a, v.role)) {
    v.values[i] = x;
    expand(v, i + 1, o, p, out);
  }
}

}  // namespace

std::vector<std::string_view> space_axis_spellings() {
  std::vector<std::string_view> out{"kind"};
  for (const Family* f : all_families())
    for (const Axis& a : f->axes())
      if (!a.spelling.empty() && std::find(out.begin(), out.end(), a.spelling) == out.end()) out.push_back(a.spelling);
  return out;
}

SpaceOptions SpaceOptions::wide() {
  SpaceOptions o;
  o.preset = Preset::wide;
  return o;
}

SpaceOptions SpaceOptions::small() {
  SpaceOptions o;
  o.preset = Preset::small;
  return o;
}

const std::vector<AxisValue>& SpaceOptions::values(const Axis& a) const {
  if (!a.spelling.empty())
    for (const auto& [spelling, vals] : overrides)
      if (spelling == a.spelling) return vals;
  return a.preset(preset);
}

const std::vector<AxisValue>& SpaceOptions::values(const Axis& a, StageRole role) const {
  if (!a.spelling.empty()) {
    const std::string of_kind = fmt::format("{}.{}", to_string(role), a.spelling);
    for (const auto& [spelling, vals] : overrides)
      if (spelling == of_kind) return vals;
  }
  return values(a);
}

const std::vector<AxisValue>* SpaceOptions::atoms() const {
  for (const auto& [spelling, vals] : overrides)
    if (spelling == "atom") return &vals;
  return nullptr;
}

Result<SpaceOptions> SpaceOptions::parse(std::string_view text) {
  SpaceOptions o;
  for (auto part : split(text, ';')) {
    if (part.empty() || part == "default") continue;
    if (part == "wide" || part == "small") {
      o = part == "wide" ? wide() : small();
      continue;
    }
    const auto eq = part.find('=');
    if (eq == std::string_view::npos)
      return fail(Errc::invalid_input,
                  fmt::format("--space: '{}' is neither a preset (default, wide, small) nor axis=values", shorten(part)));
    const std::string_view name = part.substr(0, eq), values = part.substr(eq + 1);
    if (name == "kind") {
      FT_CHECK(parse_roles(values, o.roles));
      continue;
    }
    // "moe1.tile_m=192": the values for that stage kind's variants only.
    const auto dot = name.find('.');
    const std::string_view axis_name = dot == std::string_view::npos ? name : name.substr(dot + 1);
    if (dot != std::string_view::npos) {
      if (!parse_stage_role(name.substr(0, dot)))
        return fail(Errc::invalid_input, fmt::format("--space: '{}': the kind before the dot is not moe1 or moe2", shorten(name)));
      if (axis_name == "kind" || axis_name == "atom")
        return fail(Errc::invalid_input, fmt::format("--space: '{}': the {} axis is for every kind, give it without a kind",
                                                     shorten(name), axis_name));
    }
    const Axis* axis = axis_spelled(axis_name);
    if (!axis)
      return fail(Errc::invalid_input, fmt::format("--space: unknown axis '{}'; axes: {}", shorten(axis_name),
                                                   fmt::join(space_axis_spellings(), ", ")));
    std::vector<AxisValue> parsed;
    for (auto v : split(values, ',')) parsed.push_back(FT_TRY(axis->parse(v)));
    std::erase_if(o.overrides, [&](const auto& ov) { return ov.first == name; });
    o.overrides.emplace_back(std::string(name), std::move(parsed));  // "moe1" / "moe2" as to_string(StageRole) spells them
  }
  return o;
}

std::optional<std::string> why_illegal(const Variant& v, const Problem& p) {
  const Target& t = *v.target;
  const AtomInfo* atom = v.atom();
  if (!v.family || !atom) return std::string("no kernel family and atom");
  const AtomInfo& a = *atom;
  if (!a.available_on(t.name)) return fmt::format("atom {} does not exist on {}", a.id, t.name);
  if (a.dtype != v.dtype) return fmt::format("atom {} takes {}, the variant is {}", a.id, to_string(a.dtype), to_string(v.dtype));
  if (a.lanes != t.wave_size) return fmt::format("atom {} needs {}-lane waves, {} has {}", a.id, a.lanes, t.name, t.wave_size);
  if (!v.family->takes(a)) return fmt::format("the {} family does not take atom {}", v.family->id(), a.id);
  if (v.has("tiles_per_block")) {
    const int tpb = v.get("tiles_per_block");
    if (tpb < 1) return fmt::format("tiles per block {} is not positive", tpb);
    if (tpb > 1 && !v.get("warp_specialized"))
      return fmt::format("{} tiles per block need a producer warpgroup (a persistent block's ring runs across tiles)", tpb);
  }
  if (auto why = v.family->shape_rules(v)) return why;
  if (v.threads() > t.max_block_threads) return fmt::format("{} threads per block exceed {}", v.threads(), t.max_block_threads);
  if (v.lds_bytes() > t.lds_bytes) return fmt::format("LDS use {} bytes exceeds {}", v.lds_bytes(), t.lds_bytes);
  if (int regs = v.register_estimate(); regs > t.regs_per_lane)
    return fmt::format("needs about {} registers per lane, {} allows {}", regs, t.name, t.regs_per_lane);
  return v.family->problem_rules(v, p);
}

Space enumerate_space(const Target& target, const Problem& problem, const SpaceOptions& o) {
  Space space;
  std::vector<const AtomInfo*> atoms;
  if (const auto* given = o.atoms()) {
    for (AxisValue i : *given) atoms.push_back(&all_atoms()[std::size_t(i)]);
  } else {
    atoms = atoms_for(target, problem.dtype);
  }
  // Every family that takes an atom, in registry order (none: no family uses
  // this atom's instruction).
  for (StageRole role : o.roles)
    for (const AtomInfo* atom : atoms)
      for (const Family* family : all_families()) {
        if (!family->takes(*atom)) continue;
        Variant v = Variant::of(target, role, *atom, family);
        v.dtype = problem.dtype;
        expand(v, 0, o, problem, space);
      }
  return space;
}

Result<Variant> default_variant(const Target& target, const Problem& problem, StageRole role) {
  auto atoms = atoms_for(target, problem.dtype);
  if (atoms.empty())
    return fail(Errc::invalid_input, fmt::format("no matrix atom for {} on {}", to_string(problem.dtype), target.name));
  Variant v = Variant::of(target, role, *atoms.front());
  if (!v.family) return fail(Errc::invalid_input, fmt::format("no kernel family takes atom {}", atoms.front()->id));
  v.dtype = problem.dtype;
  v.set("tile_m", 64).set("tile_n", 64).set("tile_k", 32).set("warps_m", 2).set("warps_n", 2).set("stages", 2);
  if (auto why = why_illegal(v, problem))
    return fail(Errc::invalid_input, "the default variant does not fit: " + *why, v.name());
  return v;
}

}  // namespace ft
