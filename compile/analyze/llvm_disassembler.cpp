#include "compile/analyze/llvm_disassembler.hpp"

#include <llvm-c/Disassembler.h>

#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "system/dynlib.hpp"

#ifndef FLYTUNE_DEFAULT_LIBLLVM
#define FLYTUNE_DEFAULT_LIBLLVM "libLLVM.so.19.1"
#endif

namespace ft {
namespace {

struct LlvmApi {
  LlvmInfo info;
  void (*init_target_info)() = nullptr;
  void (*init_target_mc)() = nullptr;
  void (*init_disassembler)() = nullptr;
  void (*get_version)(unsigned*, unsigned*, unsigned*) = nullptr;  // LLVMGetVersion (LLVM >= 16)
  decltype(&LLVMCreateDisasmCPU) create = nullptr;
  decltype(&LLVMDisasmInstruction) disassemble = nullptr;
  decltype(&LLVMDisasmDispose) dispose = nullptr;
};

Result<LlvmApi> load_llvm(DynLib& lib) {
  const char* env = std::getenv("FLYTUNE_LIBLLVM");
  lib = FT_TRY(DynLib::open({env ? env : "", FLYTUNE_DEFAULT_LIBLLVM, "libLLVM.so.21.1", "libLLVM.so.20.1",
                             "libLLVM.so.19.1", "libLLVM-19.so", "libLLVM.so"},
                            "LLVM library (libLLVM, from llvm-19 or newer); set FLYTUNE_LIBLLVM"));
  LlvmApi api;
  api.info.library = lib.path();
  bool ok = lib.bind(api.init_target_info, "LLVMInitializeAMDGPUTargetInfo") &&
            lib.bind(api.init_target_mc, "LLVMInitializeAMDGPUTargetMC") &&
            lib.bind(api.init_disassembler, "LLVMInitializeAMDGPUDisassembler") &&
            lib.bind(api.get_version, "LLVMGetVersion") && lib.bind(api.create, "LLVMCreateDisasmCPU") &&
            lib.bind(api.disassemble, "LLVMDisasmInstruction") && lib.bind(api.dispose, "LLVMDisasmDispose");
  if (!ok)
    return fail(Errc::toolchain,
                fmt::format("{} lacks the AMDGPU disassembler or LLVMGetVersion (needs LLVM >= 16 built with AMDGPU)",
                            lib.path()));
  unsigned major = 0, minor = 0, patch = 0;
  api.get_version(&major, &minor, &patch);
  api.info.major = int(major);
  api.info.minor = int(minor);
  api.info.patch = int(patch);
  api.init_target_info();
  api.init_target_mc();
  api.init_disassembler();
  return api;
}

Result<const LlvmApi*> llvm_api() {
  static std::once_flag once;
  static DynLib lib;
  static Result<LlvmApi> api = fail(Errc::internal, "libLLVM not loaded");
  std::call_once(once, [] { api = load_llvm(lib); });
  if (!api) return std::unexpected(api.error());
  return &*api;
}

}  // namespace

Result<LlvmInfo> llvm_library() { return FT_TRY(llvm_api())->info; }

Result<InstructionMix> disassemble_amdgpu(const Target& target, std::span<const std::byte> code, std::uint64_t pc) {
  const LlvmApi& api = *FT_TRY(llvm_api());
  if (!target.is_amd()) return fail(Errc::invalid_input, "not an AMD target", std::string(target.name));
  if (api.info.major < target.min_llvm_major)
    return fail(Errc::toolchain,
                fmt::format("disassembling {} needs LLVM >= {}; loaded {} is LLVM {}.{} (set FLYTUNE_LIBLLVM)",
                            target.name, target.min_llvm_major, api.info.library, api.info.major, api.info.minor),
                std::string(target.name));
  std::string cpu(target.name);
  LLVMDisasmContextRef ctx = api.create("amdgcn-amd-amdhsa", cpu.c_str(), nullptr, 0, nullptr, nullptr);
  if (!ctx) return fail(Errc::toolchain, fmt::format("{} has no amdgcn disassembler for {}", api.info.library, cpu));

  InstructionMix mix;
  std::vector<std::uint8_t> bytes(code.size());
  std::memcpy(bytes.data(), code.data(), code.size());
  char text[512];
  for (std::size_t at = 0; at < bytes.size();) {
    std::size_t used = api.disassemble(ctx, bytes.data() + at, bytes.size() - at, pc + at, text, sizeof text);
    if (used == 0) {  // not an instruction: count it and step one dword
      ++mix.undecoded;
      at += 4;
      continue;
    }
    at += used;
    std::string_view line(text);
    std::size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    std::size_t end = start;
    while (end < line.size() && !std::isspace(static_cast<unsigned char>(line[end]))) ++end;
    ++mix.mnemonics[std::string(line.substr(start, end - start))];
    ++mix.total;
  }
  api.dispose(ctx);
  return mix;
}

}  // namespace ft
