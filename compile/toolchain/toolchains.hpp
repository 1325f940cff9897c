#pragma once
// What compilers this machine has, probed cheaply (dlopen + one clang query),
// and which backend builds a given target, or exactly why none can.
#include <string>
#include <vector>

#include "base/error.hpp"
#include "generator/target.hpp"

namespace ft {

struct ComgrInfo {
  bool found = false;
  std::string library;               // the soname or path that loaded
  int major = 0, minor = 0;          // comgr API version (2.4 for ROCm 5.2)
  std::vector<std::string> isas;     // "amdgcn-amd-amdhsa--gfx90a", ...
  std::string error;                 // why not found
  bool lists(std::string_view target) const;  // "gfx90a"
};

struct ClangInfo {
  bool found = false;
  std::string executable;            // the clang++ binary
  std::string root;                  // "": a clang of this system; else the foreign system root (a
                                     // debootstrapped Debian folder) whose loader and libraries it needs
  std::string origin;                // how it was found: "FLYTUNE_CLANG", "PATH", "FLYTUNE_LLVM_ROOT", ...
  int major = 0;
  std::string version;               // "19.1.7"
  std::vector<std::string> amdgcn_cpus;
  std::string error;
  bool supports(std::string_view cpu) const;
  // The argv prefix that runs `program` (this clang, or a tool beside it such as
  // ld.lld or llvm-objdump): the program itself, or the root's loader, its
  // library path and the program.
  std::vector<std::string> command(const std::string& program) const;
  // A tool of this clang's LLVM ("ld.lld", "llvm-objdump"), beside the executable.
  std::string tool(std::string_view name) const;
  // Flags a clang inside a root needs to find its own parts (-resource-dir=...).
  std::vector<std::string> driver_flags() const;
  std::string resource_dir() const;  // <llvm>/lib/clang/<major>
  std::string describe() const;      // "22.1.8 (/x/usr/lib/llvm-22/bin/clang++, in the folder /x)"
};

struct NvrtcInfo {
  bool found = false;
  std::string library;
  int major = 0, minor = 0;
  std::vector<int> archs;            // nvrtcGetSupportedArchs: 75, 80, 90, ...
  std::string error;
  bool supports_sm(int sm) const;
};

struct Toolchains {
  ComgrInfo comgr;
  ClangInfo clang;         // the default clang: FLYTUNE_CLANG, else the one flytune was built with (clang++-19)
  ClangInfo newer_clang;   // LLVM >= 20 for targets the default clang lacks (gfx950): clang++-22/21/20 on
                           // PATH, else the Debian 13 folder scripts/setup-llvm.sh prepares; not searched
                           // when FLYTUNE_CLANG is set
  NvrtcInfo nvrtc;
  // The clang that builds `cpu`: the default one when it knows it, else the newer one; null if neither.
  const ClangInfo* clang_for(std::string_view cpu) const;
};

// The folder flytune caches in: $FLYTUNE_CACHE_DIR, else $XDG_CACHE_HOME/flytune, else
// $HOME/.cache/flytune; "none" when none of them is set.
std::string default_cache_dir();
// The Debian 13 folder holding clang-22 (scripts/setup-llvm.sh): $FLYTUNE_LLVM_ROOT, else
// <default_cache_dir()>/trixie-llvm.
std::string default_llvm_root();
// A clang inside the system root `root` (usr/lib/llvm-<N>/bin/clang++, the highest N >= min_major),
// probed through the root's own loader.
ClangInfo probe_clang_in_root(const std::string& root, int min_major);

// Probed once per process (thread-safe); FLYTUNE_CLANG, FLYTUNE_COMGR and
// FLYTUNE_NVRTC override where to look.
const Toolchains& toolchains();
Toolchains probe_toolchains();

// emulate: the host C++ compiler builds a shared library for the CPU emulator
// (compile/emu_compile.hpp) -- any target, never chosen by backend_for;
// `flytune search --emulate` asks for it.
enum class Backend { comgr, clang, nvrtc, emulate };
std::string_view to_string(Backend b);

// The backend that builds `t` here: comgr when it lists the ISA, else clang
// when it knows the CPU (AMD); NVRTC for NVIDIA. The error says what was found
// and what is needed, e.g. "gfx950: needs comgr from ROCm >= 6.4 or LLVM >= 20;
// found comgr 2.4 (ISAs up to gfx90a) and clang 19 (up to gfx942)".
Result<Backend> backend_for(const Target& t, const Toolchains& tc = toolchains());
// Every backend that can build `t` (for `flytune targets`).
std::vector<Backend> backends_for(const Target& t, const Toolchains& tc = toolchains());

}  // namespace ft
