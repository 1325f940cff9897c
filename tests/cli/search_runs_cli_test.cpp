// Runs that end badly or oddly (issue 15): Ctrl-C during compilation, a search
// killed outright (its run and temporary folder), two searches starting on one
// new database, another user reading a read-only database, and what a dry run
// says when it ends (and on a re-run from the compile cache).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "store/store.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using namespace std::chrono_literals;
using test::run_flytune;
using test::ScratchDir;

// A flytune process started in the background, its output going to a file.
class Background {
 public:
  Background(std::vector<std::string> env, std::vector<std::string> args, std::string log) : log_(std::move(log)) {
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(fd, 1);
      dup2(fd, 2);
      for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
      std::vector<char*> argv{const_cast<char*>(FLYTUNE_BIN)};
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(FLYTUNE_BIN, argv.data());
      _exit(127);
    }
  }
  ~Background() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void signal(int sig) const { kill(pid_, sig); }
  // The exit code (128 + signal when killed), or nullopt if still running after `limit`.
  std::optional<int> wait(std::chrono::seconds limit) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return exit_code_;
      }
      std::this_thread::sleep_for(100ms);
    }
    return std::nullopt;
  }
  std::string output() const {
    std::ifstream f(log_);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  std::optional<int> exit_code_;
};

// A process id that is certainly not running any more.
long dead_pid() {
  pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return long(pid);
}

ProcessOutput run_with_env(std::vector<std::string> env, std::vector<std::string> args) {
  std::vector<std::string> argv{"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(FLYTUNE_BIN);
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_capture(argv, {}, std::chrono::minutes(10));
  if (!r) return ProcessOutput{-1, 0, false, r.error().describe()};
  return *r;
}

// tile_m=7 holds no legal variant: a dry run builds only the support unit and
// the two default variants, a few seconds of compiling.
std::vector<std::string> small_dry_run(const std::string& db) {
  return {"search", "--dry-run", "--target", "gfx942", "--space", "tile_m=7", "--db", db};
}

TEST(SearchRuns, ADryRunSaysWhatItDidClosesStaleRunsAndCleansStaleFolders) {
  ScratchDir dir;
  const std::string db = dir.file("flytune.db");
  const std::string cache = "FLYTUNE_CACHE_DIR=" + dir.file("cache");
  // A run a killed search left 'running', and its temporary folder.
  const long gone = dead_pid();
  {
    auto store = db::Store::open(db, db::OpenMode::create);
    ASSERT_TRUE(store) << store.error().describe();
    auto run = db::RunRecord::for_this_build("flytune search", "halving");
    run.pid = gone;
    run.process = "flytune";
    ASSERT_TRUE(store->begin_run(run));
  }
  const auto stale_dir = std::filesystem::temp_directory_path() / ("flytune-objects-" + std::to_string(gone));
  std::filesystem::create_directories(stale_dir);
  std::ofstream(stale_dir / "x.hsaco") << "stale";

  auto first = run_with_env({cache}, small_dry_run(db));
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_NE(first.output.find("note: run 1 was left 'running' by process " + std::to_string(gone)), std::string::npos)
      << first.output;
  EXPECT_FALSE(std::filesystem::exists(stale_dir)) << stale_dir;
  // The space's own count agrees with `generate` (0), and the defaults are said.
  EXPECT_TRUE(std::regex_search(first.output, std::regex(R"(gfx942\s+\w+\s+0\s+\d+\s+2\s)"))) << first.output;
  EXPECT_NE(first.output.find("the space holds no legal variant; the 2 default variant(s)"), std::string::npos)
      << first.output;
  // The ending says what was done and what to try next.
  for (const char* part : {"dry run: generated, compiled and analysed 2 variants for gfx942", "db --db", "variants",
                           "verify --emulate --target gfx942", "compile --target gfx942", "timing and winners need a GPU"})
    EXPECT_NE(first.output.find(part), std::string::npos) << part << "\n" << first.output;
  EXPECT_EQ(first.output.find("('flytune db --db"), std::string::npos) << first.output;
  EXPECT_NE(first.output.find("0 of 3 code objects from the compile cache"), std::string::npos) << first.output;

  // A re-run takes everything from the cache, and says so.
  auto again = run_with_env({cache}, small_dry_run(db));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("3 of 3 code objects from the compile cache"), std::string::npos) << again.output;

  auto runs = run_flytune({"db", "--db", db, "runs"});
  ASSERT_EQ(runs.exit_code, 0) << runs.output;
  EXPECT_TRUE(std::regex_search(runs.output, std::regex(R"(\n\s*1\s+interrupted\s)"))) << runs.output;
  EXPECT_TRUE(std::regex_search(runs.output, std::regex(R"(\n\s*2\s+finished\s[^\n]*dry run)"))) << runs.output;
}

TEST(SearchRuns, CtrlCDuringCompilationStopsSoonAndMarksTheRunInterrupted) {
  ScratchDir dir;
  const std::string db = dir.file("flytune.db");
  // No cache: every one of the ~100 variants is compiled (minutes in all).
  Background search({"FLYTUNE_CACHE_DIR=none"}, {"search", "--dry-run", "--target", "gfx942", "--db", db},
                    dir.file("log"));
  std::this_thread::sleep_for(4s);
  ASSERT_FALSE(search.wait(0s)) << "finished before Ctrl-C:\n" << search.output();
  search.signal(SIGINT);
  auto code = search.wait(90s);
  ASSERT_TRUE(code) << "still compiling 90 s after Ctrl-C:\n" << search.output();
  EXPECT_EQ(*code, 130) << search.output();
  EXPECT_NE(search.output().find("interrupted: everything finished before the interrupt is saved"), std::string::npos)
      << search.output();
  auto runs = run_flytune({"db", "--db", db, "runs"});
  EXPECT_TRUE(std::regex_search(runs.output, std::regex(R"(\n\s*1\s+interrupted\s)"))) << runs.output;
}

TEST(SearchRuns, TwoSearchesStartingOnOneNewDatabaseBothSucceed) {
  ScratchDir dir;
  const std::string db = dir.file("new.db");
  const std::string cache = "FLYTUNE_CACHE_DIR=" + dir.file("cache");
  Background a({cache}, small_dry_run(db), dir.file("a.log"));
  Background b({cache}, small_dry_run(db), dir.file("b.log"));
  auto ca = a.wait(600s), cb = b.wait(600s);
  ASSERT_TRUE(ca && cb);
  EXPECT_EQ(*ca, 0) << a.output();
  EXPECT_EQ(*cb, 0) << b.output();
  auto runs = run_flytune({"db", "--db", db, "runs"});
  EXPECT_TRUE(std::regex_search(runs.output, std::regex(R"(\n\s*2\s+finished\s)"))) << runs.output;
}

// Tests run as root; the reader here is `nobody`, through setpriv.
TEST(SearchRuns, AnotherUserReadsAReadOnlyDatabase) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root, to run the reader as another user";
  if (!std::filesystem::exists("/usr/bin/setpriv")) GTEST_SKIP() << "setpriv (util-linux) is not installed";
  ScratchDir dir;
  const std::string db = dir.file("flytune.db");
  auto as_nobody = [&](std::vector<std::string> args) {
    std::vector<std::string> argv{"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", FLYTUNE_BIN};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_capture(argv, {}, std::chrono::minutes(2));
    return r ? *r : ProcessOutput{-1, 0, false, r.error().describe()};
  };
  auto store = db::Store::open(db, db::OpenMode::create);
  ASSERT_TRUE(store) << store.error().describe();
  auto run = store->begin_run(db::RunRecord::for_this_build("flytune search", "halving"));
  ASSERT_TRUE(run);
  ASSERT_TRUE(store->end_run(*run, db::RunStatus::finished));
  // The folder path must be passable; the folder and file stay root's, read-only to others.
  chmod(std::filesystem::path(db).parent_path().c_str(), 0755);
  // While the writer still has it open (-wal and -shm exist, root's).
  for (const std::string& f : {db, db + "-wal", db + "-shm"}) chmod(f.c_str(), 0644);
  auto open_runs = as_nobody({"db", "--db", db, "runs"});
  EXPECT_EQ(open_runs.exit_code, 0) << open_runs.output;
  EXPECT_NE(open_runs.output.find("finished"), std::string::npos) << open_runs.output;
  // After the writer closed it (no -wal/-shm, which nobody cannot create in the folder).
  store = fail(Errc::internal, "closed");
  ASSERT_FALSE(std::filesystem::exists(db + "-wal"));
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"db", "--db", db, "runs"}, {"db", "--db", db, "stats"}, {"report", "--db", db},
           {"export", "--db", db, "--check-coverage"}}) {
    auto r = as_nobody(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << " " << args.back() << ":\n" << r.output;
    EXPECT_EQ(r.output.find("readonly"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(db + "-wal"));
}

}  // namespace
}  // namespace ft
