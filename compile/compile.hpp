#pragma once
// Compiling kernel sources into code objects: comgr or clang (amdgcn, .hsaco)
// and NVRTC (sm_90a, .cubin), with a content-hash cache and a parallel driver;
// or, with Backend::emulate, host shared libraries (.so) for the CPU emulator.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/embedded_file.hpp"
#include "base/error.hpp"
#include "generator/target.hpp"
#include "compile/kernel_source.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft {

struct CodeObject {
  std::string kernel_name;
  std::string target;             // "gfx942", "sm_90a"
  Backend backend = Backend::clang;
  std::string toolchain_version;  // "clang 19.1.7", "comgr 2.4", "nvrtc 13.0"; emulate: the host compiler's
                                  // first --version line, "g++ (Debian 12.2.0-14) 12.2.0"
  std::vector<std::byte> binary;  // ELF: AMDGPU code object (.hsaco), CUDA cubin, or (emulate) a host .so
  std::string hash;               // XXH3-128 hex of binary
  std::string cache_key;          // XXH3-128 hex of everything that determines binary
  std::string log;                // compiler diagnostics; NVRTC: includes the ptxas -v report
  std::string ptx;                // NVRTC only: the PTX the cubin was built from
  double compile_seconds = 0;     // time this call took (small on a cache hit)
  bool from_cache = false;
};

struct CompileOptions {
  std::optional<Backend> backend;         // force a backend; default backend_for(target)
  std::vector<std::string> defines;       // "NAME" or "NAME=VALUE", passed as -D
  std::vector<std::string> extra_flags;   // passed to the compiler unchanged (after the defaults)
  // The headers the sources include, by path ("ft/port.hpp"); default: the embedded templates.
  std::span<const EmbeddedFile> headers = default_headers();
  // Cache folder; empty means default_cache_dir(), "none" disables the cache.
  std::string cache_dir;
  int opt_level = 3;                      // -O<n> (NVRTC: ptxas -O<n>; NVRTC itself rejects -O)
  unsigned jobs = 0;                      // compile_all threads; 0 = all cores
  std::chrono::seconds timeout{600};      // clang subprocess limit per source
  const Toolchains* toolchains = nullptr; // default: the probed toolchains()
  // compile_all hands out no new source once this is true (Ctrl-C); the
  // sources not started keep an Errc::interrupted result.
  const std::atomic<bool>* stop = nullptr;

  static std::span<const EmbeddedFile> default_headers();
};

// Whether a cache folder (empty: default_cache_dir()) can be used: created if
// missing, and writable. Ok for "none". The error says why not; compile()
// then works without the cache, so callers warn (or refuse an explicit folder).
Status check_cache_dir(const std::string& dir);

// ".hsaco", ".cubin" or (emulate) ".so".
std::string_view code_object_extension(Backend b);

// The backend compile() would use for `target` with `options`: the forced one
// if it can build the target here, else backend_for(target).
Result<Backend> choose_backend(const Target& target, const CompileOptions& options);

// The cache key for a source: backend, toolchain version, target, the full
// compiler argument list, the source and every header's path and content.
// Not for Backend::emulate (compile_emulated keys its own cache).
Result<std::string> compile_cache_key(const KernelSource& source, const Target& target, const CompileOptions& options);

// Compiles one source. Errors: Errc::toolchain (no compiler for the target;
// the exact text of backend_for), Errc::compile (the compiler's message first,
// then its full log), Errc::io. Context: "<target>: <kernel name>" (emulate:
// "<target>: <kernel name> (emulated)").
Result<CodeObject> compile(const KernelSource& source, const Target& target, const CompileOptions& options);

// Compiles every source on `options.jobs` threads; one result per source, in
// order. A failed source does not stop the others. `progress` (optional) is
// called after each source finishes, from one thread at a time.
using CompileProgress = std::function<void(std::size_t done, std::size_t total, const std::string& name)>;
std::vector<Result<CodeObject>> compile_all(std::span<const KernelSource> sources, const Target& target,
                                            const CompileOptions& options, const CompileProgress& progress = {});

}  // namespace ft
