#include "generator/target.hpp"

#include <algorithm>
#include <array>
#include <cstdio>

#include <fmt/format.h>

namespace ft {
namespace {

constexpr Vendor amd = Vendor::amd;
constexpr Vendor nvidia = Vendor::nvidia;
constexpr Fp8Flavour none = Fp8Flavour::none;
constexpr Fp8Flavour fnuz = Fp8Flavour::fnuz;
constexpr Fp8Flavour ocp = Fp8Flavour::ocp;
constexpr Isa cdna2 = Isa::cdna2;
constexpr Isa cdna3 = Isa::cdna3;
constexpr Isa cdna4 = Isa::cdna4;
constexpr Isa hopper = Isa::hopper;

constexpr std::array kTargets{
#define FT_TARGET(name, vendor, isa, sm, wave, lds, lds_cu, reserve, no_opt_in, banks, regs, file, gran, waves, simds, \
                  threads, fp8, fam, llvm, rocm, cuda, dry_run)                                                       \
  Target{#name, vendor, isa,   sm,   wave,  lds,  lds_cu, reserve, no_opt_in, banks, regs, file, gran, waves, simds,   \
         threads, fp8,  fam, llvm, rocm, cuda, dry_run},
#include "generator/targets.def"
#undef FT_TARGET
};

// What a row must satisfy, checked where the table is compiled.
constexpr bool rows_consistent() {
  for (const Target& t : kTargets) {
    if (t.lds_bytes + t.lds_reserve_per_block > t.lds_per_cu) return false;  // one block fits a CU / SM
    if (t.lds_without_opt_in > t.lds_bytes) return false;
    if ((t.vendor == Vendor::nvidia) != (t.sm > 0)) return false;            // sm: NVIDIA only
    if (t.max_block_threads % t.wave_size != 0) return false;
  }
  for (const Target& t : kTargets)  // a dry run without --target builds these, and commands suggest the first
    if (t.dry_run_default) return true;
  return false;
}
static_assert(rows_consistent(), "generator/targets.def: a row contradicts itself (see the column notes there)");

std::string join_names(const std::vector<const Target*>& targets, std::string_view last) {
  std::string out;
  for (std::size_t i = 0; i < targets.size(); ++i)
    out += fmt::format("{}{}", i == 0 ? "" : i + 1 == targets.size() ? last : ", ", targets[i]->name);
  return out;
}

}  // namespace

std::span<const Target> all_targets() { return kTargets; }

const Target* find_target(std::string_view name) {
  auto it = std::find_if(kTargets.begin(), kTargets.end(), [&](const Target& t) { return t.name == name; });
  return it == kTargets.end() ? nullptr : &*it;
}

Result<const Target*> lookup_target(std::string_view name) {
  if (const Target* t = find_target(name)) return t;
  return fail(Errc::invalid_input, fmt::format("unknown target '{}'; known targets: {}", name, known_target_names()));
}

std::vector<const Target*> dry_run_default_targets() {
  std::vector<const Target*> out;
  for (const Target& t : kTargets)
    if (t.dry_run_default) out.push_back(&t);
  return out;
}

std::string known_target_names(std::string_view last) {
  std::vector<const Target*> all;
  for (const Target& t : kTargets) all.push_back(&t);
  return join_names(all, last);
}

std::string dry_run_default_names(std::string_view last) { return join_names(dry_run_default_targets(), last); }

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
  return lds_per_cu / (lds_used + lds_reserve_per_block);
}

bool Target::cuda_new_enough(int major, int minor) const {
  int need_major = 0, need_minor = 0;
  if (std::sscanf(std::string(min_cuda).c_str(), "%d.%d", &need_major, &need_minor) < 1) return false;
  return major > need_major || (major == need_major && minor >= need_minor);
}

std::vector<std::string> Target::template_defines() const {
  std::vector<std::string> d{fmt::format("FT_WAVE_SIZE={}", wave_size)};
  // The e4m3 flavour the target's matrix instructions read (numeric.hpp's FT_TARGET_E4M3:
  // an fp8 atom of the other flavour fails to compile for it).
  if (fp8 == Fp8Flavour::fnuz) d.push_back("FT_FP8_FNUZ=1");
  if (fp8 == Fp8Flavour::ocp) d.push_back("FT_FP8_OCP=1");
  return d;
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

std::string_view to_string(Isa i) {
  switch (i) {
    case Isa::cdna2: return "cdna2";
    case Isa::cdna3: return "cdna3";
    case Isa::cdna4: return "cdna4";
    case Isa::hopper: return "hopper";
  }
  return "?";
}

}  // namespace ft
