// The NVRTC backend: CUDA source -> PTX -> cubin for sm_90a in memory through
// libnvrtc (opened at run time). The ptxas -v resource report lands in the
// program log, which the analyzer parses.
#include <nvrtc.h>

#include <mutex>
#include <string>

#include <fmt/format.h>

#include "compile/backends.hpp"
#include "system/dynlib.hpp"

namespace ft::detail {
namespace {

struct NvrtcApi {
  decltype(&nvrtcGetErrorString) error_string = nullptr;
  decltype(&nvrtcCreateProgram) create_program = nullptr;
  decltype(&nvrtcDestroyProgram) destroy_program = nullptr;
  decltype(&nvrtcCompileProgram) compile_program = nullptr;
  decltype(&nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&nvrtcGetProgramLog) log = nullptr;
  decltype(&nvrtcGetPTXSize) ptx_size = nullptr;
  decltype(&nvrtcGetPTX) ptx = nullptr;
  decltype(&nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&nvrtcGetCUBIN) cubin = nullptr;
};

// libnvrtc opens its builtins, libnvrtc-builtins.so.MAJOR.MINOR, by that name when it compiles. Where libnvrtc
// was found by its path (/usr/local/cuda/lib64/...: the toolkit's folder is not on the loader's path, as NVIDIA's
// runfile leaves /etc/ld.so.conf alone), the loader does not find them and every compile fails with
// NVRTC_ERROR_BUILTIN_OPERATION_FAILURE. Loaded first from libnvrtc's own folder, NVRTC finds them by their
// soname among the loaded libraries. Without them there, NVRTC's own search decides as before.
void preload_nvrtc_builtins(const NvrtcInfo& info) {
  auto slash = info.library.rfind('/');
  if (slash == std::string::npos) return;
  static DynLib builtins;
  auto lib = DynLib::open({fmt::format("{}/libnvrtc-builtins.so.{}.{}", info.library.substr(0, slash), info.major,
                                       info.minor)},
                          "NVRTC builtins");
  if (lib) builtins = std::move(*lib);
}

Result<NvrtcApi> load_nvrtc(DynLib& lib, const NvrtcInfo& info) {
  if (!info.found) return fail(Errc::toolchain, info.error, "nvrtc");
  lib = FT_TRY(DynLib::open({info.library}, "NVRTC (libnvrtc)"));
  preload_nvrtc_builtins(info);
  NvrtcApi api;
  bool ok = lib.bind(api.error_string, "nvrtcGetErrorString") && lib.bind(api.create_program, "nvrtcCreateProgram") &&
            lib.bind(api.destroy_program, "nvrtcDestroyProgram") &&
            lib.bind(api.compile_program, "nvrtcCompileProgram") && lib.bind(api.log_size, "nvrtcGetProgramLogSize") &&
            lib.bind(api.log, "nvrtcGetProgramLog") && lib.bind(api.ptx_size, "nvrtcGetPTXSize") &&
            lib.bind(api.ptx, "nvrtcGetPTX") && lib.bind(api.cubin_size, "nvrtcGetCUBINSize") &&
            lib.bind(api.cubin, "nvrtcGetCUBIN");
  if (!ok) return fail(Errc::toolchain, fmt::format("{} lacks nvrtcGetCUBIN (needs CUDA >= 11.1)", lib.path()), "nvrtc");
  return api;
}

Result<const NvrtcApi*> nvrtc_api(const NvrtcInfo& info) {
  static std::once_flag once;
  static DynLib lib;
  static Result<NvrtcApi> api = fail(Errc::internal, "nvrtc not loaded");
  std::call_once(once, [&] { api = load_nvrtc(lib, info); });
  if (!api) return std::unexpected(api.error());
  return &*api;
}

class Program {
 public:
  Program(const NvrtcApi& api) : api_(api) {}
  ~Program() {
    if (prog_) api_.destroy_program(&prog_);
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram* out() { return &prog_; }
  nvrtcProgram get() const { return prog_; }

 private:
  const NvrtcApi& api_;
  nvrtcProgram prog_ = nullptr;
};

}  // namespace

Result<BackendOutput> compile_with_nvrtc(const BackendJob& job) {
  const NvrtcApi& api = *FT_TRY(nvrtc_api(job.toolchains.nvrtc));
  auto check = [&](nvrtcResult r, std::string_view what) -> Status {
    if (r == NVRTC_SUCCESS) return {};
    return fail(Errc::toolchain, fmt::format("nvrtc: {} failed: {}", what, api.error_string(r)));
  };

  std::vector<std::string> names;  // NUL-terminated copies of the embedded views
  std::vector<std::string> texts;
  for (const EmbeddedFile& h : job.headers) {
    names.emplace_back(h.path);
    texts.emplace_back(h.text);
  }
  std::vector<const char*> name_ptrs, text_ptrs;
  for (size_t i = 0; i < names.size(); ++i) {
    name_ptrs.push_back(names[i].c_str());
    text_ptrs.push_back(texts[i].c_str());
  }
  std::string file_name = job.source.name + ".cu";
  Program program(api);
  FT_CHECK(check(api.create_program(program.out(), job.source.text.c_str(), file_name.c_str(), int(names.size()),
                                    text_ptrs.data(), name_ptrs.data()),
                 "create program"));

  std::vector<const char*> options;
  for (const auto& a : job.arguments) options.push_back(a.c_str());
  nvrtcResult compiled = api.compile_program(program.get(), int(options.size()), options.data());

  BackendOutput out;
  size_t size = 0;
  FT_CHECK(check(api.log_size(program.get(), &size), "get log size"));
  out.log.assign(size, '\0');
  FT_CHECK(check(api.log(program.get(), out.log.data()), "get log"));
  while (!out.log.empty() && out.log.back() == '\0') out.log.pop_back();
  if (compiled == NVRTC_ERROR_COMPILATION) return std::unexpected(compile_failure("nvrtc", out.log));
  FT_CHECK(check(compiled, "compile"));

  FT_CHECK(check(api.ptx_size(program.get(), &size), "get PTX size"));
  out.ptx.assign(size, '\0');
  FT_CHECK(check(api.ptx(program.get(), out.ptx.data()), "get PTX"));
  while (!out.ptx.empty() && out.ptx.back() == '\0') out.ptx.pop_back();

  FT_CHECK(check(api.cubin_size(program.get(), &size), "get CUBIN size"));
  out.binary.resize(size);
  FT_CHECK(check(api.cubin(program.get(), reinterpret_cast<char*>(out.binary.data())), "get CUBIN"));
  return out;
}

}  // namespace ft::detail
