#pragma once
// What a compiled kernel costs: registers, LDS / shared memory, scratch and
// spills, occupancy, and its instruction mix, read from the code object in
// process (AMD: ELF metadata note + LLVM disassembler; NVIDIA: ptxas report + PTX).
#include <map>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "generator/target.hpp"
#include "compile/compile.hpp"

namespace ft {

struct Resources {
  int vgprs = 0;          // AMD: architectural VGPRs (.vgpr_count - .agpr_count on gfx90a+)
  int agprs = 0;          // AMD: accumulation VGPRs
  int sgprs = 0;
  int regs = 0;           // registers per lane that bound occupancy: NVIDIA registers per thread;
                          // AMD the unified VGPR+AGPR count (.vgpr_count)
  int lds_bytes = 0;      // static + dynamic LDS / shared memory per block
  int scratch_bytes = 0;  // AMD private segment / NVIDIA stack frame, per lane
  int spill_bytes = 0;    // AMD 4 x spilled VGPRs+SGPRs; NVIDIA spill store bytes
  bool spills = false;    // any spill or scratch use
  bool serialized_mma = false;  // NVIDIA: ptxas serialised the wgmma (its warning is in notes)
  int occupancy = 0;      // waves per SIMD (warps per SM sub-partition); 0: does not fit
  std::map<std::string, int> matrix_ops;  // mnemonic -> count (v_mfma_*; NVIDIA: PTX mma/wgmma)
  int instructions = 0;   // AMD: machine instructions of the kernel; NVIDIA: PTX instructions
  std::string notes;      // what limits occupancy, where counts come from
};

// Waves (warps) per SIMD (SM sub-partition) for a block of `block_threads`
// using `regs_per_lane` registers and `lds_bytes` of LDS; 0 when it cannot run.
int occupancy_per_simd(const Target& target, int regs_per_lane, int lds_bytes, int block_threads);

// Analyzes the kernel `kernel_symbol` (the extern "C" entry point) of `object`.
// `block_threads` is the launch block size; `dynamic_lds_bytes` is added to the
// kernel's static LDS. Errors: Errc::not_found (no such kernel), Errc::toolchain
// (comgr or libLLVM missing for AMD), Errc::invalid_input (damaged object, or
// an emulated build: kNotAnalysedEmulated).
inline constexpr std::string_view kNotAnalysedEmulated =
    "not analysed: an emulated build is a host library (registers, LDS and occupancy are facts of a GPU "
    "compiler's output; the emulator checks the launch limits instead)";
Result<Resources> analyze(const CodeObject& object, const Target& target, std::string_view kernel_symbol,
                          int block_threads, int dynamic_lds_bytes);

}  // namespace ft
