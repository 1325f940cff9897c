// The clang backend: clang++ (LLVM >= 19) as a subprocess, device-only HIP for
// one amdgcn ISA, linked by ld.lld into a code object. Headers and source are
// written into a private temporary folder that is removed afterwards.
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "tuner/compile/backends.hpp"
#include "tuner/subprocess.hpp"

namespace ft::detail {
namespace {

namespace fs = std::filesystem;

class TempDir {
 public:
  static Result<TempDir> create() {
    std::error_code ec;
    fs::path base = fs::temp_directory_path(ec);
    if (ec) base = "/tmp";
    std::string pattern = (base / "flytune-clang-XXXXXX").string();
    if (!mkdtemp(pattern.data())) return fail(Errc::io, "cannot create a temporary folder", pattern);
    TempDir dir;
    dir.path_ = pattern;
    return dir;
  }
  TempDir() = default;
  TempDir(TempDir&& o) noexcept : path_(std::exchange(o.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

Status write_file(const fs::path& path, std::string_view text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  std::ofstream f(path, std::ios::binary);
  f.write(text.data(), std::streamsize(text.size()));
  f.close();
  if (!f) return fail(Errc::io, "cannot write file", path.string());
  return {};
}

// Header paths come from the embedded set; keep them inside the folder.
bool safe_relative(std::string_view p) {
  if (p.empty() || p.front() == '/') return false;
  for (const auto& part : fs::path(p))
    if (part == "..") return false;
  return true;
}

}  // namespace

Result<BackendOutput> compile_with_clang(const BackendJob& job) {
  const ClangInfo& clang = job.toolchains.clang;
  if (!clang.found) return fail(Errc::toolchain, clang.error, "clang");
  auto dir = FT_TRY(TempDir::create());
  fs::path include_dir = dir.path() / "include";
  for (const EmbeddedFile& h : job.headers) {
    if (!safe_relative(h.path)) return fail(Errc::invalid_input, "header path must be relative", std::string(h.path));
    FT_CHECK(write_file(include_dir / h.path, h.text));
  }
  fs::path source = dir.path() / (job.source.name + ".hip");
  fs::path object = dir.path() / "out.hsaco";
  FT_CHECK(write_file(source, job.source.text));

  std::vector<std::string> argv{clang.executable};
  argv.insert(argv.end(), job.arguments.begin(), job.arguments.end());
  argv.insert(argv.end(), {"-I", include_dir.string(), "-o", object.string(), source.string()});
  auto run = FT_TRY(run_capture(argv, {}, job.timeout));

  BackendOutput out;
  // Paths of the private folder mean nothing later; show sources by their own names.
  out.log = run.output;
  for (std::string prefix : {include_dir.string() + "/", dir.path().string() + "/"})
    for (size_t at; (at = out.log.find(prefix)) != std::string::npos;) out.log.erase(at, prefix.size());
  if (run.timed_out)
    return fail(Errc::timeout, fmt::format("clang did not finish within {} s", job.timeout.count()));
  if (run.exit_code != 0) return std::unexpected(compile_failure("clang", out.log));

  std::ifstream f(object, std::ios::binary);
  if (!f) return fail(Errc::toolchain, "clang exited 0 but wrote no code object", object.string());
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto view = std::as_bytes(std::span(bytes));
  out.binary.assign(view.begin(), view.end());
  return out;
}

}  // namespace ft::detail
