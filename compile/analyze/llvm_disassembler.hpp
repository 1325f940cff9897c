#pragma once
// Instruction mix of machine code through LLVM's disassembler library
// (libLLVM opened at run time, llvm-c Disassembler API), in-process.
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "generator/target.hpp"

namespace ft {

struct InstructionMix {
  std::map<std::string, int> mnemonics;  // as LLVM prints them: "v_mfma_f32_16x16x16_bf16", "s_endpgm", ...
  int total = 0;                         // decoded instructions
  int undecoded = 0;                     // 4-byte words LLVM could not decode
};

// The libLLVM in use: $FLYTUNE_LIBLLVM, else the one flytune was built against
// (FLYTUNE_DEFAULT_LIBLLVM), else libLLVM.so.<major> on the library path.
struct LlvmInfo {
  std::string library;
  int major = 0, minor = 0, patch = 0;
};
Result<LlvmInfo> llvm_library();

// Disassembles `code` (starting at address `pc`) for an AMD target
// (triple amdgcn-amd-amdhsa, CPU target.name). Errc::toolchain when libLLVM is
// missing or older than the target needs.
Result<InstructionMix> disassemble_amdgpu(const Target& target, std::span<const std::byte> code, std::uint64_t pc = 0);

}  // namespace ft
