#include "compile/toolchain/toolchains.hpp"

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <regex>

#include <fmt/format.h>

#include "generator/target.hpp"
#include "system/dynlib.hpp"
#include "system/subprocess.hpp"

#ifndef FLYTUNE_DEFAULT_CLANG
#define FLYTUNE_DEFAULT_CLANG "clang++-19"
#endif

namespace ft {
namespace {

namespace fs = std::filesystem;

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

// A Debian system root in a folder (debootstrap) runs its programs through its own loader.
constexpr const char* kRootLoader = "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2";

// The folder above `program` that is a foreign system root (holds its own loader), or "".
std::string system_root_of(const std::string& program) {
  fs::path p = fs::absolute(program).lexically_normal();
  for (p = p.parent_path(); p.has_relative_path(); p = p.parent_path()) {
    std::error_code ec;
    if (fs::exists(p / kRootLoader, ec)) return p.string();
  }
  return {};
}

// Asks `path` (inside `root` when that is not empty) for its version and amdgcn CPUs.
ClangInfo probe_clang_at(const std::string& path, const std::string& root, std::string origin) {
  ClangInfo info;
  info.root = root;
  info.origin = std::move(origin);
  info.executable = path;
  std::vector<std::string> argv = info.command(path);
  argv.insert(argv.end(), {"--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"});
  auto out = run_capture(argv);
  if (!out || out->exit_code != 0) {
    info.error = fmt::format("{} did not answer --print-supported-cpus: {}", path,
                             out ? out->output.substr(0, out->output.find('\n')) : out.error().message);
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
  if (!root.empty()) {
    std::error_code ec;
    std::string resource = info.resource_dir();
    if (!fs::is_directory(resource, ec)) {
      info.error = fmt::format("{} has no resource folder {}", path, resource);
      return info;
    }
  }
  info.found = true;
  return info;
}

// A clang named by the user or the build: a name on PATH or a path (perhaps inside a root).
ClangInfo probe_clang_named(const std::string& exe, const std::string& origin) {
  auto path = find_executable(exe);
  if (!path) {
    ClangInfo info;
    info.origin = origin;
    info.error = origin == "FLYTUNE_CLANG"
                     ? fmt::format("FLYTUNE_CLANG={}: {}", exe, path.error().message)
                     : fmt::format("clang for amdgcn not found ({}); install clang-19 or set FLYTUNE_CLANG", exe);
    return info;
  }
  ClangInfo info = probe_clang_at(*path, system_root_of(*path), origin);
  if (!info.found && origin == "FLYTUNE_CLANG") info.error = fmt::format("FLYTUNE_CLANG={}: {}", exe, info.error);
  return info;
}

// The LLVM release the newest AMD target needs (targets.def: min_llvm_major).
int newest_llvm_needed() {
  int need = 0;
  for (const Target& t : all_targets())
    if (t.is_amd()) need = std::max(need, t.min_llvm_major);
  return need;
}

// The newest clang++-<N> looked for on PATH.
constexpr int kNewestClangSought = 30;

// clang++-<N> on PATH for the highest N >= `min_major`, else the Debian folder's clang.
ClangInfo probe_newer_clang(int min_major) {
  for (int n = kNewestClangSought; n >= min_major; --n) {
    std::string name = fmt::format("clang++-{}", n);
    if (!find_executable(name)) continue;
    ClangInfo info = probe_clang_named(name, "PATH");
    if (info.found && info.major >= min_major) return info;
  }
  std::string root = default_llvm_root();
  std::error_code ec;
  if (!fs::is_directory(root, ec)) {
    ClangInfo info;
    info.error = fmt::format("no clang++-{}..{} on PATH and no LLVM folder {} (scripts/setup-llvm.sh prepares it)",
                             min_major, kNewestClangSought, root);
    return info;
  }
  return probe_clang_in_root(root, min_major);
}

void probe_clangs(Toolchains& tc) {
  if (const char* env = std::getenv("FLYTUNE_CLANG"); env && *env) {
    tc.clang = probe_clang_named(env, "FLYTUNE_CLANG");
    return;  // the user chose one clang: no other is searched
  }
  tc.clang = probe_clang_named(FLYTUNE_DEFAULT_CLANG, "default");
  int need = newest_llvm_needed();
  if (!tc.clang.found || tc.clang.major < need) tc.newer_clang = probe_newer_clang(need);
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

namespace {

// usr/lib/llvm-<N> of a clang: clang++-19 is /usr/bin/clang++-19 -> ../lib/llvm-19/bin/clang++
// (Debian's links are relative, so this holds inside a folder's root too).
fs::path llvm_dir_of(const std::string& executable) {
  std::error_code ec;
  fs::path real = fs::canonical(executable, ec);
  if (ec) real = executable;
  return real.parent_path().parent_path();
}

}  // namespace

std::vector<std::string> ClangInfo::command(const std::string& program) const {
  if (root.empty()) return {program};
  fs::path r(root);
  std::string llvm_lib = (llvm_dir_of(executable) / "lib").string();
  return {(r / kRootLoader).string(), "--library-path",
          fmt::format("{}:{}:{}", (r / "usr/lib/x86_64-linux-gnu").string(), (r / "lib/x86_64-linux-gnu").string(), llvm_lib),
          program};
}

std::string ClangInfo::tool(std::string_view name) const { return (llvm_dir_of(executable) / "bin" / name).string(); }

std::string ClangInfo::resource_dir() const {
  return (llvm_dir_of(executable) / "lib/clang" / std::to_string(major)).string();
}

std::vector<std::string> ClangInfo::driver_flags() const {
  // Run through a loader, clang takes the loader for its own executable: tell it where its
  // resource headers and its linker (-B: lld beside it) are.
  if (root.empty()) return {};
  return {"-B" + (llvm_dir_of(executable) / "bin").string(), "-resource-dir=" + resource_dir()};
}

std::string ClangInfo::describe() const {
  if (!found) return "missing (" + error + ")";
  if (!root.empty()) return fmt::format("{} ({}, run through the loader of its Debian folder)", version, executable);
  return fmt::format("{} ({}; {})", version, executable, origin);
}

const ClangInfo* Toolchains::clang_for(std::string_view cpu) const {
  for (const ClangInfo* c : {&clang, &newer_clang})
    if (c->found && c->supports(cpu)) return c;
  return nullptr;
}

std::string default_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (auto dir = env("FLYTUNE_CACHE_DIR"); !dir.empty()) return dir;
  if (auto xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/flytune";
  if (auto home = env("HOME"); !home.empty()) return home + "/.cache/flytune";
  return "none";
}

std::string default_llvm_root() {
  if (const char* v = std::getenv("FLYTUNE_LLVM_ROOT"); v && *v) return v;
  return default_cache_dir() + "/trixie-llvm";
}

ClangInfo probe_clang_in_root(const std::string& root, int min_major) {
  int best = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(root) / "usr/lib", ec)) {
    std::string name = entry.path().filename().string();
    if (!name.starts_with("llvm-")) continue;
    int n = std::atoi(name.c_str() + 5);
    if (n >= min_major && n > best && fs::exists(entry.path() / "bin/clang++", ec)) best = n;
  }
  ClangInfo info;
  info.root = root;
  if (!fs::exists(fs::path(root) / kRootLoader, ec))
    info.error = fmt::format("{} is not a system root: it has no {} (re-run scripts/setup-llvm.sh)", root, kRootLoader);
  else if (best < 0)
    info.error = fmt::format("{} holds no usr/lib/llvm-<N>/bin/clang++ with N >= {} (re-run scripts/setup-llvm.sh)", root,
                             min_major);
  if (!info.error.empty()) return info;
  return probe_clang_at((fs::path(root) / fmt::format("usr/lib/llvm-{}/bin/clang++", best)).string(), root, "LLVM folder");
}

bool NvrtcInfo::supports_sm(int sm) const { return std::find(archs.begin(), archs.end(), sm) != archs.end(); }

Toolchains probe_toolchains() {
  Toolchains tc;
  tc.comgr = probe_comgr();
  probe_clangs(tc);
  tc.nvrtc = probe_nvrtc();
  return tc;
}

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
    case Backend::emulate: return "emulate";
  }
  return "?";
}

std::vector<Backend> backends_for(const Target& t, const Toolchains& tc) {
  std::vector<Backend> out;
  if (t.is_amd()) {
    if (tc.comgr.found && tc.comgr.lists(t.name)) out.push_back(Backend::comgr);
    if (tc.clang_for(t.name)) out.push_back(Backend::clang);
  } else {
    if (tc.nvrtc.found && tc.nvrtc.supports_sm(t.sm) && t.cuda_new_enough(tc.nvrtc.major, tc.nvrtc.minor))
      out.push_back(Backend::nvrtc);
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
    std::string clang = tc.clang.found        ? fmt::format("clang {} (up to {})", tc.clang.major, newest_gfx(tc.clang.amdgcn_cpus))
                        : tc.clang.error.empty() ? std::string("no clang")
                                                 : fmt::format("no clang ({})", tc.clang.error);
    // Where a newer clang was sought in vain, say where (and how to get one).
    std::string newer = !tc.newer_clang.found && !tc.newer_clang.error.empty() ? "; " + tc.newer_clang.error : "";
    return fail(Errc::toolchain,
                fmt::format("needs comgr from ROCm >= {} or LLVM >= {}; found {} and {}{}", t.min_rocm, t.min_llvm_major,
                            comgr, clang, newer),
                std::string(t.name));
  }
  std::string nvrtc = !tc.nvrtc.found                ? "no NVRTC (" + tc.nvrtc.error + ")"
                      : !tc.nvrtc.supports_sm(t.sm) ? fmt::format("NVRTC {}.{} without sm_{}", tc.nvrtc.major, tc.nvrtc.minor, t.sm)
                                                    : fmt::format("NVRTC {}.{}", tc.nvrtc.major, tc.nvrtc.minor);
  return fail(Errc::toolchain, fmt::format("needs NVRTC from CUDA >= {}; found {}", t.min_cuda, nvrtc),
              std::string(t.name));
}

}  // namespace ft
