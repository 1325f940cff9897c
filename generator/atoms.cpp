#include "generator/atoms.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace ft {
namespace {

// A row's element token as the problem dtype it serves.
constexpr DType dtype_bf16 = DType::bf16;
constexpr DType dtype_f16 = DType::f16;
constexpr DType dtype_e4m3 = DType::e4m3;
constexpr DType dtype_e4m3fnuz = DType::e4m3;

constexpr std::array kAtoms{
#define FT_MFMA(id, M, N, K, elem, builtin, operand, targets, asm90a, asm94x) \
  AtomInfo{#id, "mfma", M, N, K, dtype_##elem, Elem::elem, targets, asm90a, asm94x, 64},
#include "templates/ft/atoms_mfma.def"
#undef FT_MFMA
#define FT_MMA_SYNC(id, M, N, K, elem, ptx_types, targets, sass) \
  AtomInfo{#id, "mma.sync", M, N, K, dtype_##elem, Elem::elem, targets, "", sass, 32},
#include "templates/ft/atoms_mma_sync.def"
#undef FT_MMA_SYNC
#define FT_WGMMA(id, M, NSTEP, K, elem, ptx_types, targets, sass) \
  AtomInfo{#id, "wgmma", M, NSTEP, K, dtype_##elem, Elem::elem, targets, "", sass, 32},
#include "templates/ft/atoms_wgmma.def"
#undef FT_WGMMA
};

}  // namespace

bool AtomInfo::available_on(std::string_view target) const {
  std::string_view rest = targets;
  while (!rest.empty()) {
    auto comma = rest.find(',');
    if (rest.substr(0, comma) == target) return true;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return false;
}

std::string AtomInfo::short_name() const {
  if (warpgroup()) return "wgmma";  // its N is the variant's (weight matrices x tile_n)
  return fmt::format("{}{}x{}x{}", family == "mfma" ? "mfma" : "mma", m, n, k);
}

std::string_view AtomInfo::mnemonic_on(const Target& target) const {
  // CDNA2 spells the MFMA mnemonics its own way (v_mfma_f32_16x16x16bf16_1k); CDNA3
  // and CDNA4 share one spelling; NVIDIA atoms keep their SASS name in the same column.
  return target.isa == Isa::cdna2 ? asm_cdna2 : asm_cdna3;
}

std::span<const AtomInfo> all_atoms() { return kAtoms; }

const AtomInfo* find_atom(std::string_view id) {
  auto it = std::find_if(kAtoms.begin(), kAtoms.end(), [&](const AtomInfo& a) { return a.id == id; });
  return it == kAtoms.end() ? nullptr : &*it;
}

std::vector<const AtomInfo*> atoms_for(const Target& target, DType dtype) {
  std::vector<const AtomInfo*> out;
  for (const AtomInfo& a : kAtoms)
    if (a.dtype == dtype && a.available_on(target.name)) out.push_back(&a);
  return out;
}

}  // namespace ft
