// The clang backend: clang++ (LLVM >= 19) as a subprocess, device-only HIP for
// one amdgcn ISA, linked by ld.lld into a code object. Headers and source are
// written into a private temporary folder that is removed afterwards. The clang
// is the one Toolchains::clang_for picks for the target: this system's, or one
// inside a Debian folder (run through that folder's loader, job by job).
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <utility>

#include <fmt/format.h>

#include "compile/backends.hpp"
#include "system/subprocess.hpp"

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

std::vector<std::vector<std::string>> parse_planned_jobs(std::string_view text, std::string& other_lines) {
  std::vector<std::vector<std::string>> jobs;
  for (std::string_view rest = text; !rest.empty();) {
    auto nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view{} : rest.substr(nl + 1);
    if (!line.starts_with(" \"")) {
      // The driver's banner says nothing about this compile; keep anything else (warnings).
      static constexpr std::string_view kBanner[] = {"clang version", "Target:", "Thread model:", "InstalledDir:"};
      bool banner = std::any_of(std::begin(kBanner), std::end(kBanner),
                                [&](std::string_view b) { return line.find(b) != std::string_view::npos; });
      if (!banner && !line.empty()) other_lines += std::string(line) + "\n";
      continue;
    }
    std::vector<std::string> job;
    for (std::size_t i = 0; i < line.size(); ++i) {
      if (line[i] != '"') continue;
      std::string arg;
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\' && i + 1 < line.size()) ++i;
        arg += line[i];
      }
      job.push_back(std::move(arg));
    }
    if (!job.empty()) jobs.push_back(std::move(job));
  }
  return jobs;
}

namespace {

// The program of a planned job, run from the clang's folder: cc1 is the clang itself (it took the
// loader for its own executable); tools must come from the same folder.
Status run_from_root(const ClangInfo& clang, std::vector<std::string>& job) {
  if (job.size() > 1 && job[1].starts_with("-cc1")) job[0] = clang.executable;
  else if (!job[0].starts_with(clang.root + "/"))
    return fail(Errc::toolchain, fmt::format("the clang in {} planned to run {}, which is outside that folder", clang.root, job[0]));
  std::vector<std::string> argv = clang.command(job[0]);
  argv.insert(argv.end(), job.begin() + 1, job.end());
  job = std::move(argv);
  return {};
}

// A clang inside a Debian folder runs through that folder's loader, so it cannot start its own
// subprocesses (cc1, lld): the kernel would start them with this system's loader and libraries.
// Its driver only plans the compile (-###); flytune runs each planned job through the folder's
// loader, with the intermediate files inside `dir`.
Result<ProcessOutput> run_planned(const ClangInfo& clang, std::vector<std::string> argv, const fs::path& dir,
                                  const std::string& output, std::chrono::seconds timeout) {
  argv.push_back("-###");
  auto plan = FT_TRY(run_capture(argv, {}, timeout));
  ProcessOutput result;
  auto jobs = parse_planned_jobs(plan.output, result.output);
  if (plan.exit_code != 0 || jobs.empty()) {
    result.exit_code = plan.exit_code != 0 ? plan.exit_code : 1;
    if (jobs.empty()) result.output += "clang planned no jobs\n";
    return result;
  }
  // Each job's output other than the code object is an intermediate: keep it in `dir`.
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    auto o = std::find(jobs[i].begin(), jobs[i].end(), std::string("-o"));
    if (o == jobs[i].end() || o + 1 == jobs[i].end() || o[1] == output) continue;
    std::string from = o[1], to = (dir / fmt::format("job{}{}", i, fs::path(from).extension().string())).string();
    for (auto& job : jobs) std::replace(job.begin(), job.end(), from, to);
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& job : jobs) {
    FT_CHECK(run_from_root(clang, job));
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    auto run = FT_TRY(run_capture(job, {}, std::max(left, std::chrono::milliseconds(1))));
    result.output += run.output;
    result.exit_code = run.exit_code;
    result.signal = run.signal;
    result.timed_out = run.timed_out;
    if (run.exit_code != 0 || run.timed_out) break;
  }
  return result;
}

}  // namespace

Result<BackendOutput> compile_with_clang(const BackendJob& job) {
  const ClangInfo* clang = job.toolchains.clang_for(job.target.name);
  if (!clang) return fail(Errc::toolchain, fmt::format("no clang here knows {}", job.target.name), "clang");
  auto dir = FT_TRY(TempDir::create());
  fs::path include_dir = dir.path() / "include";
  for (const EmbeddedFile& h : job.headers) {
    if (!safe_relative(h.path)) return fail(Errc::invalid_input, "header path must be relative", std::string(h.path));
    FT_CHECK(write_file(include_dir / h.path, h.text));
  }
  fs::path source = dir.path() / (job.source.name + ".hip");
  fs::path object = dir.path() / "out.hsaco";
  FT_CHECK(write_file(source, job.source.text));

  std::vector<std::string> argv = clang->command(clang->executable);
  for (auto& flag : clang->driver_flags()) argv.push_back(flag);
  argv.insert(argv.end(), job.arguments.begin(), job.arguments.end());
  argv.insert(argv.end(), {"-I", include_dir.string(), "-o", object.string(), source.string()});
  auto run = FT_TRY(clang->root.empty() ? run_capture(argv, {}, job.timeout)
                                        : run_planned(*clang, argv, dir.path(), object.string(), job.timeout));

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
