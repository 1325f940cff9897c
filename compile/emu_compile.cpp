#include "compile/emu_compile.hpp"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include <fmt/format.h>

#include "templates/embedded.hpp"
#include "system/hash.hpp"
#include "system/subprocess.hpp"
#include "compile/toolchain/toolchains.hpp"  // default_cache_dir

namespace fs = std::filesystem;

namespace ft::emu {
namespace {

Result<std::string> find_compiler(const EmuCompileOptions& options) {
  if (!options.compiler.empty()) return find_executable(options.compiler);
  if (const char* env = std::getenv("FLYTUNE_EMU_CXX"); env && *env) return find_executable(env);
  if (auto gxx = find_executable("g++")) return gxx;
  if (auto cxx = find_executable("c++")) return cxx;
  return fail(Errc::toolchain, "no host C++ compiler for emulation: install g++ or set FLYTUNE_EMU_CXX");
}

// `<compiler> --version`, first line; asked once per compiler.
Result<std::string> compiler_version(const std::string& compiler) {
  static std::mutex mutex;
  static std::map<std::string, std::string> known;
  {
    std::lock_guard lock(mutex);
    if (auto it = known.find(compiler); it != known.end()) return it->second;
  }
  auto out = FT_TRY(run_capture({compiler, "--version"}, {}, std::chrono::milliseconds(30000)));
  if (out.exit_code != 0) return fail(Errc::toolchain, fmt::format("'{} --version' failed: {}", compiler, out.output));
  std::string line = out.output.substr(0, out.output.find('\n'));
  std::lock_guard lock(mutex);
  known[compiler] = line;
  return line;
}

Status write_file(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), std::streamsize(text.size()));
  if (!out) return fail(Errc::io, "cannot write", path.string());
  return {};
}

Result<std::vector<std::byte>> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(Errc::io, "cannot read", path.string());
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(bytes.size());
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

std::string unique_suffix() {
  static std::atomic<unsigned> counter{0};
  return fmt::format("{}.{}", getpid(), counter.fetch_add(1));
}

// The headers as files under <dir>/include-<hash>, written once (renamed into place).
Result<fs::path> materialise_headers(const fs::path& dir, std::span<const EmbeddedFile> headers, const std::string& hash) {
  const fs::path include = dir / ("include-" + hash);
  std::error_code ec;
  if (fs::exists(include / ".complete", ec)) return include;
  const fs::path staging = dir / ("include-" + hash + ".tmp." + unique_suffix());
  for (const EmbeddedFile& h : headers) {
    const fs::path p = staging / std::string(h.path);
    fs::create_directories(p.parent_path(), ec);
    FT_CHECK(write_file(p, h.text));
  }
  FT_CHECK(write_file(staging / ".complete", ""));
  fs::rename(staging, include, ec);
  if (ec) fs::remove_all(staging, ec);  // another process got there first
  if (!fs::exists(include / ".complete")) return fail(Errc::io, "cannot create the header folder", include.string());
  return include;
}

Error compile_error(const std::string& log) {
  std::string first;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);)
    if (line.find("error") != std::string::npos) {
      first = line;
      break;
    }
  if (first.empty()) first = log.substr(0, log.find('\n'));
  return Error{Errc::compile, first + "\n" + log, {}};
}

}  // namespace

std::string emulation_glue(const KernelSource& source) {
  std::string glue = "\n// Emulation glue (tuner/emulate): raw-argument entries the runtime calls.\n";
  for (const std::string& e : source.entry_points) glue += fmt::format("FT_EMU_ENTRY({})\n", e);
  return glue;
}

std::vector<std::string> emulation_flags(const Target& target, const EmuCompileOptions& options) {
  // -fno-strict-aliasing: the templates copy 16-byte chunks through u16 buffers,
  // as GPU code does; -fvisibility=hidden: only the entries are exported.
  std::vector<std::string> flags = {"-std=c++20", fmt::format("-O{}", options.opt_level), "-shared", "-fPIC",
                                    "-fno-strict-aliasing", "-fvisibility=hidden", "-DFT_EMULATE",
                                    fmt::format("-DFT_EMU_TARGET_{}=1", target.name)};
  for (const auto& d : target.template_defines()) flags.push_back("-D" + d);
  flags.insert(flags.end(), options.extra_flags.begin(), options.extra_flags.end());
  return flags;
}

Result<EmuLibrary> compile_emulated(const KernelSource& source, const Target& target, const EmuCompileOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const std::string context = fmt::format("{}: {} (emulated)", target.name, source.name);
  auto add_context = [&](Error e) { return std::unexpected(with_context(std::move(e), context)); };
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  auto compiler = find_compiler(options);
  if (!compiler) return add_context(compiler.error());
  auto version = compiler_version(*compiler);
  if (!version) return add_context(version.error());
  const std::span<const EmbeddedFile> headers = options.headers.empty() ? templates::files() : options.headers;
  const std::vector<std::string> flags = emulation_flags(target, options);
  const std::string text = source.text + emulation_glue(source);

  ContentHasher header_hash;
  for (const EmbeddedFile& h : headers) header_hash.add(h.path).add(h.text);
  const std::string headers_key = header_hash.hex();
  ContentHasher key_hash;
  key_hash.add("emulate").add(*compiler).add(*version).add(target.name);
  for (const auto& f : flags) key_hash.add(f);
  key_hash.add(text).add(headers_key);
  const std::string key = key_hash.hex();

  EmuLibrary lib;
  lib.name = source.name;
  lib.target = std::string(target.name);
  lib.entry_points = source.entry_points;
  lib.compiler_version = *version;
  lib.cache_key = key;

  std::string cache_setting = options.cache_dir.empty() ? default_cache_dir() : options.cache_dir;
  const bool cached = cache_setting != "none";
  std::error_code ec;
  fs::path dir;
  if (cached) {
    dir = options.cache_dir.empty() ? fs::path(cache_setting) / "emu" : fs::path(cache_setting);
  } else {
    dir = fs::temp_directory_path(ec) / ("flytune-emu-" + unique_suffix());
  }
  fs::create_directories(dir, ec);
  if (ec) return add_context(Error{Errc::io, "cannot create the emulation build folder: " + ec.message(), dir.string()});
  const fs::path final_path = dir / key.substr(0, 2) / (key + ".so");
  if (cached && fs::exists(final_path, ec)) {
    if (auto bytes = read_file(final_path); bytes && !bytes->empty()) {
      lib.binary = std::move(*bytes);
      lib.from_cache = true;
      lib.compile_seconds = seconds();
      return lib;
    }
  }

  auto include = materialise_headers(dir, headers, headers_key);
  if (!include) return add_context(include.error());
  const std::string tag = key + "." + unique_suffix();
  const fs::path src_path = dir / (tag + ".cpp");
  const fs::path out_path = dir / (tag + ".so");
  if (auto w = write_file(src_path, text); !w) return add_context(w.error());
  std::vector<std::string> argv{*compiler};
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), {"-I" + include->string(), src_path.string(), "-o", out_path.string()});
  auto run = run_capture(argv, {}, std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout));
  fs::remove(src_path, ec);
  if (!run) return add_context(run.error());
  lib.log = run->output;
  if (run->timed_out) {
    fs::remove(out_path, ec);
    return add_context(Error{Errc::timeout, fmt::format("the host compiler ran longer than {} s", options.timeout.count()), {}});
  }
  if (run->exit_code != 0) {
    fs::remove(out_path, ec);
    return add_context(compile_error(run->output));
  }
  auto bytes = read_file(out_path);
  if (!bytes) return add_context(bytes.error());
  lib.binary = std::move(*bytes);
  if (cached) {
    fs::create_directories(final_path.parent_path(), ec);
    fs::rename(out_path, final_path, ec);
    if (ec) fs::remove(out_path, ec);
  } else {
    fs::remove_all(dir, ec);
  }
  lib.compile_seconds = seconds();
  return lib;
}

}  // namespace ft::emu
