#include "generator/variant.hpp"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ft {
namespace {

// A program error (code asking for a key its family does not declare), never
// a result of user input: every record is read through from_json, which gives
// a variant all of its family's axes. The tool's and the runtime's edges turn
// it into one "internal error" line (tests/unit/generator/family_test.cpp
// holds every family to the standard axes the layer program reads).
[[noreturn]] void no_axis(const Variant& v, std::string_view key) {
  throw std::logic_error(fmt::format("family {} has no axis '{}'", v.family ? v.family->id() : "?", key));
}

}  // namespace

Variant Variant::of(const Target& target, StageRole role, const AtomInfo& atom) {
  return of(target, role, atom, family_of(atom));
}

Variant Variant::of(const Target& target, StageRole role, const AtomInfo& atom, const Family* family) {
  Variant v;
  v.target = &target;
  v.family = family;
  v.role = role;
  v.dtype = atom.dtype;
  if (!v.family) return v;  // an atom no family takes: legality says so
  for (const Axis& a : v.family->axes()) v.values.push_back(a.initial);
  v.values[v.family->index_of("atom")] = AxisValue(&atom - all_atoms().data());
  return v;
}

int Variant::get(std::string_view key) const {
  if (!family) no_axis(*this, key);
  const std::size_t i = family->index_of(key);
  if (i >= values.size()) no_axis(*this, key);
  const Axis& a = family->axes()[i];
  if (a.type != AxisType::pair || a.key == key) return values[i];
  return a.pair_keys[0] == key ? pair_first(values[i]) : pair_second(values[i]);
}

bool Variant::has(std::string_view key) const { return family && family->index_of(key) < values.size(); }

Variant& Variant::set(std::string_view key, int value) {
  if (!family) no_axis(*this, key);
  const std::size_t i = family->index_of(key);
  if (i >= values.size()) no_axis(*this, key);
  const Axis& a = family->axes()[i];
  if (a.type != AxisType::pair || a.key == key) values[i] = value;
  else if (a.pair_keys[0] == key) values[i] = pack_pair(value, pair_second(values[i]));
  else values[i] = pack_pair(pair_first(values[i]), value);
  return *this;
}

const AtomInfo* Variant::atom() const {
  if (!has("atom")) return nullptr;
  const std::size_t i = std::size_t(get("atom"));
  return i < all_atoms().size() ? &all_atoms()[i] : nullptr;
}

std::string Variant::name() const {
  std::string s = fmt::format("ft_{}_{}_{}", target->name, to_string(role), to_string(dtype));
  const auto ax = family->axes();
  std::vector<std::size_t> order(ax.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ax[a].name_rank < ax[b].name_rank; });
  for (std::size_t i : order)
    if (ax[i].token && ax[i].present_in(*this)) s += ax[i].token(*this, values[i]);
  return s;
}

nlohmann::json Variant::to_json() const {
  nlohmann::json j{{"target", target->name}, {"kind", to_string(role)}, {"dtype", to_string(dtype)}, {"family", family->id()}};
  const auto ax = family->axes();
  for (std::size_t i = 0; i < ax.size(); ++i) {
    const Axis& a = ax[i];
    const AxisValue x = values[i];
    if (!a.present_in(*this)) continue;  // an fp8 axis of a 16-bit variant
    switch (a.type) {
      case AxisType::integer: j[std::string(a.key)] = x; break;
      case AxisType::boolean: j[std::string(a.key)] = x != 0; break;
      case AxisType::choice:
      case AxisType::atom: j[std::string(a.key)] = a.format(x); break;
      case AxisType::pair:
        j[std::string(a.pair_keys[0])] = pair_first(x);
        j[std::string(a.pair_keys[1])] = pair_second(x);
        break;
    }
  }
  return j;
}

namespace {

std::unexpected<Error> bad(std::string what) { return fail(Errc::invalid_input, "variant parameters: " + what); }

// One axis's value from a record; nullopt for a key the record does not carry.
Result<std::optional<AxisValue>> read_axis(const nlohmann::json& j, const Axis& a) {
  auto integer = [&](std::string_view key) -> Result<std::optional<int>> {
    auto it = j.find(std::string(key));
    if (it == j.end()) return std::optional<int>{};
    if (!it->is_number_integer()) return bad(fmt::format("{} is not an integer", key));
    const long long v = it->get<long long>();
    if (v < 0 || v > 0xffff) return bad(fmt::format("{} {} is out of range", key, v));
    return std::optional<int>{int(v)};
  };
  switch (a.type) {
    case AxisType::integer: {
      auto v = FT_TRY(integer(a.key));
      return v ? std::optional<AxisValue>{*v} : std::nullopt;
    }
    case AxisType::pair: {
      auto m = FT_TRY(integer(a.pair_keys[0]));
      auto n = FT_TRY(integer(a.pair_keys[1]));
      if (!m && !n) return std::optional<AxisValue>{};
      if (!m || !n) return bad(fmt::format("{} needs both {} and {}", a.key, a.pair_keys[0], a.pair_keys[1]));
      return std::optional<AxisValue>{pack_pair(*m, *n)};
    }
    case AxisType::boolean: {
      auto it = j.find(std::string(a.key));
      if (it == j.end()) return std::optional<AxisValue>{};
      if (!it->is_boolean()) return bad(fmt::format("{} is not a boolean", a.key));
      return std::optional<AxisValue>{it->get<bool>() ? 1 : 0};
    }
    case AxisType::choice:
    case AxisType::atom: {
      auto it = j.find(std::string(a.key));
      if (it == j.end()) return std::optional<AxisValue>{};
      const std::string text = it->is_string() ? it->get<std::string>() : it->dump();
      if (a.type == AxisType::atom) {
        const AtomInfo* atom = find_atom(text);
        if (!atom) return bad(fmt::format("unknown atom '{}'", shorten(text)));
        return std::optional<AxisValue>{AxisValue(atom - all_atoms().data())};
      }
      for (std::size_t k = 0; k < a.names.size(); ++k)
        if (a.names[k] == text) return std::optional<AxisValue>{AxisValue(k)};
      return bad(fmt::format("unknown {} '{}'", a.key, shorten(text)));
    }
  }
  return bad("an axis of no type");
}

}  // namespace

Result<Variant> Variant::from_json(const nlohmann::json& j) {
  if (!j.is_object()) return bad("not a JSON object");
  auto str = [&](const char* key) -> std::string {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string{};
  };
  Variant v;
  v.target = find_target(str("target"));
  if (!v.target) return bad("unknown target '" + shorten(str("target")) + "'");
  const auto role = parse_stage_role(str("kind"));
  if (!role) return bad("unknown kind '" + shorten(str("kind")) + "'");
  v.role = *role;
  v.dtype = FT_TRY(parse_dtype(str("dtype")));
  const AtomInfo* atom = find_atom(str("atom"));
  if (!atom) return bad("unknown atom '" + shorten(str("atom")) + "'");
  // Records before families existed name none: the atom's family.
  if (j.contains("family")) {
    v.family = find_family(str("family"));
    if (!v.family) return bad("unknown family '" + shorten(str("family")) + "'");
  } else {
    v.family = family_of(*atom);
    if (!v.family) return bad(fmt::format("no kernel family takes atom {}", atom->id));
  }
  for (const Axis& a : v.family->axes()) {
    std::optional<AxisValue> x = FT_TRY(read_axis(j, a));
    if (!x && a.required) return bad(fmt::format("missing {}", a.type == AxisType::pair ? a.pair_keys[0] : a.key));
    v.values.push_back(x ? *x : a.initial);
  }
  // An axis the variant does not have (present) takes its initial value whatever
  // the record says; one it has must be given where the axis says so.
  const auto ax = v.family->axes();
  for (std::size_t i = 0; i < ax.size(); ++i) {
    if (ax[i].present_in(v)) continue;
    if (j.contains(std::string(ax[i].key))) return bad(fmt::format("{} applies to fp8 variants only", ax[i].key));
    v.values[i] = ax[i].initial;
  }
  if (v.has("tiles_per_block") && v.get("tiles_per_block") < 1) return bad("tiles_per_block is not a positive integer");
  return v;
}

}  // namespace ft
