#include "tuner/toolchain/toolchains.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <regex>

#include <fmt/format.h>

#include "tuner/dynlib.hpp"
#include "tuner/subprocess.hpp"

#ifndef FLYTUNE_DEFAULT_CLANG
#define FLYTUNE_DEFAULT_CLANG "clang++-19"
#endif

namespace ft {
namespace {

const char* env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : fallback;
}

// A library named by an environment variable is the only one tried (a wrong
// path is an error naming the variable, as with FLYTUNE_LIBHIP/FLYTUNE_LIBCUDA);
// without the variable, the usual names in order.
template <class Defaults>
Result<DynLib> open_library(const char* variable, std::string_view what, Defaults defaults) {
  const char* chosen = std::getenv(variable);
  if (!chosen || !*chosen) return defaults();
  auto lib = DynLib::open({chosen}, what);
  if (!lib)
    return fail(Errc::toolchain, fmt::format("{}={} cannot be loaded ({}); fix the path or unset {}", variable, chosen,
                                             lib.error().message, variable));
  return lib;
}

ComgrInfo probe_comgr() {
  ComgrInfo info;
  auto lib = open_library("FLYTUNE_COMGR", "ROCm comgr (libamd_comgr)", [] {
    return DynLib::open({"libamd_comgr.so.3", "libamd_comgr.so.2", "/opt/rocm/lib/libamd_comgr.so.3",
                         "/opt/rocm/lib/libamd_comgr.so.2"},
                        "ROCm comgr (libamd_comgr)");
  });
  if (!lib) {
    info.error = lib.error().message;
    return info;
  }
  using GetVersion = void(size_t*, size_t*);
  using GetCount = int(size_t*);
  using GetName = int(size_t, const char**);
  GetVersion* get_version = nullptr;
  GetCount* get_count = nullptr;
  GetName* get_name = nullptr;
  if (!lib->bind(get_version, "amd_comgr_get_version") || !lib->bind(get_count, "amd_comgr_get_isa_count") ||
      !lib->bind(get_name, "amd_comgr_get_isa_name")) {
    info.error = fmt::format("{} lacks the comgr ISA query functions", lib->path());
    return info;
  }
  size_t major = 0, minor = 0, count = 0;
  get_version(&major, &minor);
  info.major = int(major);
  info.minor = int(minor);
  if (get_count(&count) != 0) {
    info.error = "comgr could not list its ISAs";
    return info;
  }
  for (size_t i = 0; i < count; ++i) {
    const char* name = nullptr;
    if (get_name(i, &name) == 0 && name) info.isas.emplace_back(name);
  }
  info.library = lib->path();
  info.found = true;
  // The library stays loaded for the process: the comgr backend reuses it.
  static DynLib keep;
  keep = std::move(*lib);
  return info;
}

ClangInfo probe_clang() {
  ClangInfo info;
  std::string exe = env_or("FLYTUNE_CLANG", FLYTUNE_DEFAULT_CLANG);
  auto path = find_executable(exe);
  if (!path) {
    info.error = fmt::format("clang for amdgcn not found ({}); install clang-19 or set FLYTUNE_CLANG", exe);
    return info;
  }
  auto out = run_capture({*path, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"});
  if (!out || out->exit_code != 0) {
    info.error = fmt::format("{} did not answer --print-supported-cpus", *path);
    return info;
  }
  std::smatch m;
  static const std::regex version_re(R"(clang version (\d+)\.(\d+)\.(\d+))");
  if (std::regex_search(out->output, m, version_re)) {
    info.major = std::stoi(m[1]);
    info.version = fmt::format("{}.{}.{}", m[1].str(), m[2].str(), m[3].str());
  }
  static const std::regex cpu_re(R"(\bgfx[0-9a-f]+\b)");
  for (auto it = std::sregex_iterator(out->output.begin(), out->output.end(), cpu_re); it != std::sregex_iterator(); ++it)
    info.amdgcn_cpus.push_back(it->str());
  info.executable = *path;
  info.found = true;
  return info;
}

NvrtcInfo probe_nvrtc() {
  NvrtcInfo info;
  auto lib = open_library("FLYTUNE_NVRTC", "NVRTC (libnvrtc)", [] {
    return DynLib::open({"libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.13",
                         "/usr/local/cuda/lib64/libnvrtc.so.12"},
                        "NVRTC (libnvrtc)");
  });
  if (!lib) {
    info.error = lib.error().message;
    return info;
  }
  using Version = int(int*, int*);
  using NumArchs = int(int*);
  using Archs = int(int*);
  Version* version = nullptr;
  NumArchs* num = nullptr;
  Archs* archs = nullptr;
  if (!lib->bind(version, "nvrtcVersion") || !lib->bind(num, "nvrtcGetNumSupportedArchs") ||
      !lib->bind(archs, "nvrtcGetSupportedArchs")) {
    info.error = fmt::format("{} lacks nvrtcGetSupportedArchs (needs CUDA >= 11.2)", lib->path());
    return info;
  }
  version(&info.major, &info.minor);
  int n = 0;
  if (num(&n) == 0 && n > 0) {
    info.archs.resize(size_t(n));
    archs(info.archs.data());
  }
  info.library = lib->path();
  info.found = true;
  static DynLib keep;
  keep = std::move(*lib);
  return info;
}

std::string newest_gfx(const std::vector<std::string>& names) {
  // The highest gfx9 ISA a list holds, for messages ("ISAs up to gfx90a").
  std::string best;
  int best_num = -1;
  static const std::regex re(R"(gfx9([0-9a-f]{2}))");
  for (const auto& n : names) {
    std::smatch m;
    if (std::regex_search(n, m, re)) {
      int v = std::stoi(m[1].str(), nullptr, 16);
      if (v > best_num) {
        best_num = v;
        best = "gfx9" + m[1].str();
      }
    }
  }
  return best.empty() ? "none" : best;
}

}  // namespace

bool ComgrInfo::lists(std::string_view target) const {
  return std::any_of(isas.begin(), isas.end(), [&](const std::string& isa) {
    // "amdgcn-amd-amdhsa--gfx90a" or with feature suffixes ":sramecc+:xnack-"
    auto pos = isa.rfind("--");
    std::string_view cpu = std::string_view(isa).substr(pos == std::string::npos ? 0 : pos + 2);
    cpu = cpu.substr(0, cpu.find(':'));
    return cpu == target;
  });
}

bool ClangInfo::supports(std::string_view cpu) const {
  return std::find(amdgcn_cpus.begin(), amdgcn_cpus.end(), cpu) != amdgcn_cpus.end();
}

bool NvrtcInfo::supports_sm(int sm) const { return std::find(archs.begin(), archs.end(), sm) != archs.end(); }

Toolchains probe_toolchains() { return Toolchains{probe_comgr(), probe_clang(), probe_nvrtc()}; }

const Toolchains& toolchains() {
  static std::once_flag once;
  static Toolchains tc;
  std::call_once(once, [] { tc = probe_toolchains(); });
  return tc;
}

std::string_view to_string(Backend b) {
  switch (b) {
    case Backend::comgr: return "comgr";
    case Backend::clang: return "clang";
    case Backend::nvrtc: return "nvrtc";
  }
  return "?";
}

std::vector<Backend> backends_for(const Target& t, const Toolchains& tc) {
  std::vector<Backend> out;
  if (t.is_amd()) {
    if (tc.comgr.found && tc.comgr.lists(t.name)) out.push_back(Backend::comgr);
    if (tc.clang.found && tc.clang.supports(t.name)) out.push_back(Backend::clang);
  } else {
    if (tc.nvrtc.found && tc.nvrtc.supports_sm(90) && tc.nvrtc.major >= 12) out.push_back(Backend::nvrtc);
  }
  return out;
}

Result<Backend> backend_for(const Target& t, const Toolchains& tc) {
  auto all = backends_for(t, tc);
  if (!all.empty()) return all.front();
  if (t.is_amd()) {
    std::string comgr = tc.comgr.found
                            ? fmt::format("comgr {}.{} (ISAs up to {})", tc.comgr.major, tc.comgr.minor, newest_gfx(tc.comgr.isas))
                            : tc.comgr.error.empty() ? std::string("no comgr") : "no comgr (" + tc.comgr.error + ")";
    std::string clang = tc.clang.found
                            ? fmt::format("clang {} (up to {})", tc.clang.major, newest_gfx(tc.clang.amdgcn_cpus))
                            : tc.clang.error.empty() ? std::string("no clang") : "no clang (" + tc.clang.error + ")";
    return fail(Errc::toolchain,
                fmt::format("needs comgr from ROCm >= {} or LLVM >= {}; found {} and {}", t.min_rocm, t.min_llvm_major,
                            comgr, clang),
                std::string(t.name));
  }
  std::string nvrtc = tc.nvrtc.found ? fmt::format("NVRTC {}.{} without sm_90", tc.nvrtc.major, tc.nvrtc.minor)
                                     : "no NVRTC (" + tc.nvrtc.error + ")";
  return fail(Errc::toolchain, fmt::format("needs NVRTC from CUDA >= {}; found {}", t.min_cuda, nvrtc),
              std::string(t.name));
}

}  // namespace ft
