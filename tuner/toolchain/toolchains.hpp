#pragma once
// What compilers this machine has, probed cheaply (dlopen + one clang query),
// and which backend builds a given target, or exactly why none can.
#include <string>
#include <vector>

#include "generator/error.hpp"
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
  std::string executable;
  int major = 0;
  std::string version;               // "19.1.7"
  std::vector<std::string> amdgcn_cpus;
  std::string error;
  bool supports(std::string_view cpu) const;
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
  ClangInfo clang;
  NvrtcInfo nvrtc;
};

// Probed once per process (thread-safe); FLYTUNE_CLANG, FLYTUNE_COMGR and
// FLYTUNE_NVRTC override where to look.
const Toolchains& toolchains();
Toolchains probe_toolchains();

enum class Backend { comgr, clang, nvrtc };
std::string_view to_string(Backend b);

// The backend that builds `t` here: comgr when it lists the ISA, else clang
// when it knows the CPU (AMD); NVRTC for NVIDIA. The error says what was found
// and what is needed, e.g. "gfx950: needs comgr from ROCm >= 6.4 or LLVM >= 20;
// found comgr 2.4 (ISAs up to gfx90a) and clang 19 (up to gfx942)".
Result<Backend> backend_for(const Target& t, const Toolchains& tc = toolchains());
// Every backend that can build `t` (for `flytune targets`).
std::vector<Backend> backends_for(const Target& t, const Toolchains& tc = toolchains());

}  // namespace ft
