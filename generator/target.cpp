#include "generator/target.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace ft {
namespace {

constexpr Vendor amd = Vendor::amd;
constexpr Vendor nvidia = Vendor::nvidia;
constexpr Fp8Flavour none = Fp8Flavour::none;
constexpr Fp8Flavour fnuz = Fp8Flavour::fnuz;
constexpr Fp8Flavour ocp = Fp8Flavour::ocp;

constexpr std::array kTargets{
#define FT_TARGET(name, vendor, wave, lds, banks, regs, file, gran, waves, simds, fp8, fam, llvm, rocm, cuda) \
  Target{#name, vendor, wave, lds, banks, regs, file, gran, waves, simds, fp8, fam, llvm, rocm, cuda},
#include "generator/targets.def"
#undef FT_TARGET
};

}  // namespace

std::span<const Target> all_targets() { return kTargets; }

const Target* find_target(std::string_view name) {
  auto it = std::find_if(kTargets.begin(), kTargets.end(), [&](const Target& t) { return t.name == name; });
  return it == kTargets.end() ? nullptr : &*it;
}

Result<const Target*> lookup_target(std::string_view name) {
  if (const Target* t = find_target(name)) return t;
  std::string known;
  for (const Target& t : kTargets) known += (known.empty() ? "" : ", ") + std::string(t.name);
  return fail(Errc::invalid_input, fmt::format("unknown target '{}'; known targets: {}", name, known));
}

std::vector<std::string> Target::family_list() const {
  std::vector<std::string> out;
  std::string_view rest = families;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    out.emplace_back(rest.substr(0, comma));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

std::string Target::comgr_isa() const {
  return is_amd() ? fmt::format("amdgcn-amd-amdhsa--{}", name) : std::string{};
}

int Target::occupancy_for_registers(int used) const {
  if (used <= 0) return max_waves_per_simd;
  if (used > regs_per_lane) return 0;
  int rounded = (used + alloc_granule - 1) / alloc_granule * alloc_granule;
  return std::min(max_waves_per_simd, regs_file_per_simd / rounded);
}

int Target::blocks_for_lds(int lds_used) const {
  if (lds_used <= 0) return 1 << 16;
  int per_cu = is_nvidia() ? 233472 : lds_bytes;  // sm_90: 228 KiB per SM, 227 per block
  return per_cu / lds_used;
}

std::string_view to_string(Vendor v) { return v == Vendor::amd ? "amd" : "nvidia"; }

std::string_view to_string(Fp8Flavour f) {
  switch (f) {
    case Fp8Flavour::none: return "none";
    case Fp8Flavour::fnuz: return "e4m3fnuz/e5m2fnuz";
    case Fp8Flavour::ocp: return "e4m3fn/e5m2 (OCP)";
  }
  return "?";
}

}  // namespace ft
