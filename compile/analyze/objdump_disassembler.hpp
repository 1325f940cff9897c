#pragma once
// Instruction mix of one kernel through the llvm-objdump beside a clang, as a
// subprocess: for targets newer than the LLVM loaded in process (LLVM 19 cannot
// decode gfx950; the clang-22 that compiles gfx950 brings its own llvm-objdump).
#include <cstddef>
#include <span>
#include <string_view>

#include "base/error.hpp"
#include "generator/target.hpp"
#include "compile/analyze/llvm_disassembler.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft {

// Disassembles the function `symbol` of the code object `binary` for `target`
// with `clang`'s llvm-objdump (run from the clang's folder where it has one).
// Errc::toolchain when that llvm-objdump is missing or fails.
Result<InstructionMix> disassemble_with_objdump(const ClangInfo& clang, const Target& target,
                                                std::span<const std::byte> binary, std::string_view symbol);

// The mnemonics of llvm-objdump's listing of `symbol` (--no-show-raw-insn --no-leading-addr).
InstructionMix parse_objdump_listing(std::string_view listing, std::string_view symbol);

}  // namespace ft
