#pragma once
// Internal: the compiler backends behind compile() (compile.cpp picks one and
// wraps the GPU ones with the cache). Not part of the public API.
#include <chrono>
#include <span>
#include <string>
#include <vector>

#include "base/embedded_file.hpp"
#include "base/error.hpp"
#include "generator/target.hpp"
#include "compile/compile.hpp"
#include "compile/kernel_source.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft::detail {

struct BackendJob {
  const KernelSource& source;
  const Target& target;
  std::span<const EmbeddedFile> headers;
  std::vector<std::string> arguments;  // from backend_arguments()
  int opt_level = 3;
  std::chrono::seconds timeout{600};
  const Toolchains& toolchains;
};

struct BackendOutput {
  std::vector<std::byte> binary;
  std::string log;
  std::string ptx;
};

// The compiler arguments a backend gets for a target (also hashed into the cache key).
std::vector<std::string> backend_arguments(Backend b, const Target& target, int opt_level,
                                           const std::vector<std::string>& defines,
                                           const std::vector<std::string>& extra_flags);
std::string toolchain_version(Backend b, const Toolchains& tc, const Target& target);

Result<BackendOutput> compile_with_comgr(const BackendJob& job);
Result<BackendOutput> compile_with_clang(const BackendJob& job);
Result<BackendOutput> compile_with_nvrtc(const BackendJob& job);

// Backend::emulate: the source built by emu::compile_emulated() into a host
// shared library for the CPU emulator, in its own cache (<cache>/emu).
Result<CodeObject> compile_for_emulator(const KernelSource& source, const Target& target, const CompileOptions& options);

// The jobs a clang driver printed for -### (each argument double-quoted, with \ escaping
// ", \ and $); other lines but the driver's banner are appended to `other_lines`.
std::vector<std::vector<std::string>> parse_planned_jobs(std::string_view text, std::string& other_lines);

// Errc::compile with the log's first error line as the summary, then the log.
Error compile_failure(std::string_view compiler, const std::string& log);

// The binary is an ELF of the expected machine and type that defines every entry point.
Status check_code_object(std::span<const std::byte> binary, const Target& target, const KernelSource& source);

}  // namespace ft::detail
