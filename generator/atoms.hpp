#pragma once
// Host-side description of every matrix atom, expanded from the same .def rows
// as the device atoms (templates/ft/atoms_*.def), so shape, types and register
// cost cannot drift from what the kernels use.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "templates/ft/elem.hpp"

namespace ft {

struct AtomInfo {
  std::string_view id;          // the device type ft::atom::<id>
  std::string_view family;      // "mfma" | "mma.sync" | "wgmma"
  int m, n, k;                  // wgmma: n is the step of N; a variant's N is weight matrices x tile_n
  DType dtype;                  // the problem dtype it serves (e4m3 for both fp8 flavours)
  Elem operand;                 // the operands' element type, the row's own (e4m3fnuz on gfx942)
  std::string_view targets;     // comma separated
  std::string_view asm_cdna2;   // mnemonic LLVM prints on CDNA2 targets (MFMA; Target::isa)
  std::string_view asm_cdna3;   // on CDNA3 / CDNA4 (MFMA); SASS name for NVIDIA atoms
  int lanes;                    // 64 (wave) or 32 (warp; a wgmma warpgroup is 4 warps)

  // A warpgroup atom reading shared memory (WgmmaGemm), not a wave-level one (TiledGemm).
  bool warpgroup() const { return family == "wgmma"; }

  // Operand elements per lane (the device layouts' a_regs / b_regs: register slots of
  // one element each, 8 or 16 bits), and what they occupy in 32-bit registers.
  int a_regs() const { return m * k / lanes; }
  int b_regs() const { return n * k / lanes; }
  int operand_bytes() const { return elem_bytes(operand); }
  int a_registers() const { return (a_regs() * operand_bytes() + 3) / 4; }
  int b_registers() const { return (b_regs() * operand_bytes() + 3) / 4; }
  int c_regs() const { return m * n / lanes; }   // fp32 accumulators per lane
  bool available_on(std::string_view target) const;
  // "mfma16x16x16", "mma16x8x16": the atom's part of a kernel name.
  std::string short_name() const;
  // The mnemonic the disassembler shows for this atom on `target`.
  std::string_view mnemonic_on(const Target& target) const;
};

std::span<const AtomInfo> all_atoms();
const AtomInfo* find_atom(std::string_view id);
// Atoms of `target` for `dtype`, in table order.
std::vector<const AtomInfo*> atoms_for(const Target& target, DType dtype);

}  // namespace ft
