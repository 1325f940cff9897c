#include "compile/compile.hpp"

#include <elf.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "templates/embedded.hpp"
#include "compile/analyze/elf_image.hpp"
#include "compile/backends.hpp"
#include "compile/cache.hpp"
#include "system/hash.hpp"

namespace ft {

namespace detail {

std::vector<std::string> backend_arguments(Backend b, const Target& target, int opt_level,
                                           const std::vector<std::string>& defines,
                                           const std::vector<std::string>& extra_flags) {
  std::vector<std::string> args;
  switch (b) {
    case Backend::comgr:
      // comgr's HIP compile is device-only; no HIP headers or device libraries.
      args = {fmt::format("-O{}", opt_level), "-std=c++20", "-nogpuinc", "-nogpulib"};
      break;
    case Backend::clang:
      args = {"-x", "hip", "--cuda-device-only", fmt::format("--offload-arch={}", target.name), "-nogpulib",
              "-nogpuinc", "--no-gpu-bundle-output", fmt::format("-O{}", opt_level), "-std=c++20"};
      break;
    case Backend::nvrtc:
      // NVRTC rejects -O<n>; the optimisation level goes to ptxas.
      args = {fmt::format("--gpu-architecture={}", target.name), "-std=c++20", "--ptxas-options=-v",
              fmt::format("--ptxas-options=-O{}", opt_level), "-default-device"};
      break;
    case Backend::emulate:  // compile_for_emulator: emu::emulation_flags()
      break;
  }
  // The target's facts the templates read (FT_WAVE_SIZE), then the caller's macros.
  for (const auto& d : target.template_defines()) args.push_back("-D" + d);
  for (const auto& d : defines) args.push_back("-D" + d);
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  return args;
}

std::string toolchain_version(Backend b, const Toolchains& tc, const Target& target) {
  switch (b) {
    case Backend::comgr: return fmt::format("comgr {}.{}", tc.comgr.major, tc.comgr.minor);
    case Backend::clang: {
      const ClangInfo* c = tc.clang_for(target.name);
      if (!c) return "clang ?";
      return fmt::format("clang {}", c->version.empty() ? std::to_string(c->major) : c->version);
    }
    case Backend::nvrtc: return fmt::format("nvrtc {}.{}", tc.nvrtc.major, tc.nvrtc.minor);
    case Backend::emulate: return "host compiler";  // compile_for_emulator asks it for its version
  }
  return "?";
}

Error compile_failure(std::string_view compiler, const std::string& log) {
  std::string_view first;
  for (std::string_view rest = log; !rest.empty();) {
    auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    if (line.find("error") != std::string_view::npos) {
      first = line;
      break;
    }
    if (nl == std::string_view::npos) break;
    rest.remove_prefix(nl + 1);
  }
  std::string summary = first.empty() ? fmt::format("{} failed", compiler) : fmt::format("{} failed: {}", compiler, first);
  std::string message = log.empty() ? summary : summary + "\n" + log;
  while (!message.empty() && message.back() == '\n') message.pop_back();
  return Error{Errc::compile, std::move(message), {}};
}

Status check_code_object(std::span<const std::byte> binary, const Target& target, const KernelSource& source) {
  auto image = ElfImage::parse(binary);
  if (!image) return fail(Errc::toolchain, "the compiler's output is not a code object: " + image.error().message);
  std::uint16_t machine = target.is_amd() ? kElfMachineAmdgpu : kElfMachineCuda;
  if (image->machine() != machine)
    return fail(Errc::toolchain, fmt::format("code object is for ELF machine {}, expected {}", image->machine(), machine));
  // AMD: a linked (shared object) code object, loadable by the HIP runtime.
  if (target.is_amd() && image->type() != ET_DYN)
    return fail(Errc::toolchain, fmt::format("code object is ELF type {}, not a linked shared object", image->type()));
  for (const auto& entry : source.entry_points)
    if (!image->symbol(entry)) return fail(Errc::compile, fmt::format("entry point '{}' missing from the code object", entry));
  return {};
}

}  // namespace detail

std::span<const EmbeddedFile> CompileOptions::default_headers() { return templates::files(); }

Status check_cache_dir(const std::string& dir_in) {
  const std::string dir = dir_in.empty() ? default_cache_dir() : dir_in;
  if (dir == "none") return {};
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return fail(Errc::io, fmt::format("cannot create the compile cache folder: {}", ec.message()), dir);
  if (!fs::is_directory(dir, ec)) return fail(Errc::io, "the compile cache path is not a folder", dir);
  // Writable? access() answers for this user (root passes even without w bits,
  // and root can write there).
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    return fail(Errc::io, fmt::format("cannot write to the compile cache folder: {}", std::strerror(errno)), dir);
  return {};
}

std::string_view code_object_extension(Backend b) {
  switch (b) {
    case Backend::nvrtc: return ".cubin";
    case Backend::emulate: return ".so";
    case Backend::comgr:
    case Backend::clang: break;
  }
  return ".hsaco";
}

namespace {

const Toolchains& toolchains_of(const CompileOptions& options) {
  return options.toolchains ? *options.toolchains : toolchains();
}

}  // namespace

Result<Backend> choose_backend(const Target& target, const CompileOptions& options) {
  const Toolchains& tc = toolchains_of(options);
  if (!options.backend) return backend_for(target, tc);
  // The host compiler builds every target for the emulator; whether there is
  // one is known when compile_emulated looks for it.
  if (*options.backend == Backend::emulate) return Backend::emulate;
  auto usable = backends_for(target, tc);
  if (std::find(usable.begin(), usable.end(), *options.backend) != usable.end()) return *options.backend;
  std::string reason;
  switch (*options.backend) {
    case Backend::comgr:
      reason = !tc.comgr.found ? tc.comgr.error : fmt::format("comgr {}.{} does not list the ISA", tc.comgr.major, tc.comgr.minor);
      break;
    case Backend::clang:
      reason = !tc.clang.found ? tc.clang.error : fmt::format("clang {} does not know the CPU", tc.clang.major);
      if (tc.newer_clang.found) reason += fmt::format(", nor does clang {}", tc.newer_clang.major);
      break;
    case Backend::nvrtc:
      reason = target.is_amd()                   ? std::string("NVRTC builds NVIDIA targets only")
               : !tc.nvrtc.found                 ? tc.nvrtc.error
               : !tc.nvrtc.supports_sm(target.sm) ? fmt::format("NVRTC lacks sm_{}", target.sm)
                                                 : fmt::format("NVRTC {}.{} is older than CUDA {}", tc.nvrtc.major,
                                                               tc.nvrtc.minor, target.min_cuda);
      break;
    case Backend::emulate: break;  // returned above
  }
  if (target.is_nvidia() && *options.backend != Backend::nvrtc) reason = "comgr and clang build AMD targets only";
  return fail(Errc::toolchain, fmt::format("backend {} cannot build it: {}", to_string(*options.backend), reason),
              std::string(target.name));
}

namespace {

struct Plan {
  Backend backend;
  std::vector<std::string> arguments;
  std::string toolchain_version;
  std::string key;
};

Result<Plan> make_plan(const KernelSource& source, const Target& target, const CompileOptions& options) {
  Plan plan;
  plan.backend = FT_TRY(choose_backend(target, options));
  if (plan.backend == Backend::emulate)
    return fail(Errc::internal, "emulated builds are keyed by emu::compile_emulated, not by a compile plan", std::string(target.name));
  const Toolchains& tc = toolchains_of(options);
  plan.arguments = detail::backend_arguments(plan.backend, target, options.opt_level, options.defines, options.extra_flags);
  plan.toolchain_version = detail::toolchain_version(plan.backend, tc, target);

  ContentHasher h;
  h.add("flytune-compile-1").add(to_string(plan.backend)).add(plan.toolchain_version).add(target.name);
  // Where the compiler lives matters as much as its version string.
  h.add(plan.backend == Backend::clang ? tc.clang_for(target.name)->executable
        : plan.backend == Backend::comgr ? tc.comgr.library
                                         : tc.nvrtc.library);
  h.add(std::int64_t(plan.arguments.size()));
  for (const auto& a : plan.arguments) h.add(a);
  h.add(source.name).add(source.text);
  std::vector<const EmbeddedFile*> headers;
  for (const auto& f : options.headers) headers.push_back(&f);
  std::sort(headers.begin(), headers.end(), [](auto* a, auto* b) { return a->path < b->path; });
  h.add(std::int64_t(headers.size()));
  for (const EmbeddedFile* f : headers) h.add(f->path).add(f->text);
  plan.key = h.hex();
  return plan;
}

}  // namespace

Result<std::string> compile_cache_key(const KernelSource& source, const Target& target, const CompileOptions& options) {
  return FT_TRY(make_plan(source, target, options)).key;
}

Result<CodeObject> compile(const KernelSource& source, const Target& target, const CompileOptions& options) {
  auto started = std::chrono::steady_clock::now();
  auto seconds_since_start = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  };
  if (FT_TRY(choose_backend(target, options)) == Backend::emulate) return detail::compile_for_emulator(source, target, options);
  Plan plan = FT_TRY(make_plan(source, target, options));
  std::string context = fmt::format("{}: {}", target.name, source.name);

  std::string cache_dir = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  std::optional<CompileCache> cache;
  if (cache_dir != "none") cache.emplace(cache_dir);
  if (cache) {
    if (auto hit = cache->load(plan.key); hit && hit->backend == plan.backend) {
      hit->kernel_name = source.name;
      hit->target = std::string(target.name);
      hit->compile_seconds = seconds_since_start();
      return std::move(*hit);
    }
  }

  detail::BackendJob job{source,         target,          options.headers, plan.arguments,
                         options.opt_level, options.timeout, toolchains_of(options)};
  Result<detail::BackendOutput> built = fail(Errc::internal, "no backend ran");
  switch (plan.backend) {
    case Backend::comgr: built = detail::compile_with_comgr(job); break;
    case Backend::clang: built = detail::compile_with_clang(job); break;
    case Backend::nvrtc: built = detail::compile_with_nvrtc(job); break;
    case Backend::emulate: break;  // compile_for_emulator, above
  }
  if (!built) return std::unexpected(with_context(std::move(built).error(), context));
  if (auto ok = detail::check_code_object(built->binary, target, source); !ok)
    return std::unexpected(with_context(ok.error(), context));

  CodeObject object;
  object.kernel_name = source.name;
  object.target = std::string(target.name);
  object.backend = plan.backend;
  object.toolchain_version = plan.toolchain_version;
  object.binary = std::move(built->binary);
  object.hash = xxh3_128_hex(object.binary);
  object.cache_key = plan.key;
  object.log = std::move(built->log);
  object.ptx = std::move(built->ptx);
  if (cache) {
    // A cache that cannot be written costs time later, not this result.
    if (auto stored = cache->store(object); !stored)
      object.log += fmt::format("flytune: warning: not cached: {}\n", stored.error().describe());
  }
  object.compile_seconds = seconds_since_start();
  return object;
}

std::vector<Result<CodeObject>> compile_all(std::span<const KernelSource> sources, const Target& target,
                                            const CompileOptions& options, const CompileProgress& progress) {
  std::vector<Result<CodeObject>> results(sources.size(), fail(Errc::internal, "not compiled"));
  if (sources.empty()) return results;
  unsigned jobs = options.jobs ? options.jobs : std::max(1u, std::thread::hardware_concurrency());
  jobs = unsigned(std::min<std::size_t>(jobs, sources.size()));

  std::atomic<std::size_t> next{0};
  std::size_t done = 0;
  std::mutex progress_mutex;
  auto stopped = [&] { return options.stop && options.stop->load(); };
  auto worker = [&] {
    for (std::size_t i; (i = next.fetch_add(1)) < sources.size();) {
      if (stopped()) {
        results[i] = fail(Errc::interrupted, "not compiled: interrupted", sources[i].name);
        continue;
      }
      results[i] = compile(sources[i], target, options);
      std::lock_guard lock(progress_mutex);
      ++done;
      if (progress) progress(done, sources.size(), sources[i].name);
    }
  };
  {
    std::vector<std::jthread> pool;
    for (unsigned t = 1; t < jobs; ++t) pool.emplace_back(worker);
    worker();  // the calling thread works too
  }
  return results;
}

}  // namespace ft
