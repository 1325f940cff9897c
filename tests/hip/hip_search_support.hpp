#pragma once
// What the tests that run flytune searches on the HIP test double share: the
// environment the binary and its workers inherit, and the JSON summary.
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/target.hpp"

#include "compile/toolchain/toolchains.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft::test {

// FLYTUNE_LIBHIP names the double (both GPUs: hip:0 gfx942, hip:1 gfx950);
// compiled code objects and the double's emulated builds are cached in the
// build tree, so a rerun of the tests compiles nothing; the LLVM folder stays
// the one this process found (it lives under the default cache folder);
// FLYTUNE_HIP_DOUBLE_SPACE tells the double the search's --space.
class HipDoubleEnv {
 public:
  explicit HipDoubleEnv(const std::string& space)
      : llvm_root_(default_llvm_root()), lib_("FLYTUNE_LIBHIP", FT_HIP_DOUBLE), gpus_("FLYTUNE_HIP_DOUBLE_GPUS", nullptr),
        cache_("FLYTUNE_CACHE_DIR", FT_HIP_TEST_CACHE "/search"), llvm_("FLYTUNE_LLVM_ROOT", llvm_root_.c_str()),
        space_("FLYTUNE_HIP_DOUBLE_SPACE", space.c_str()) {}

 private:
  std::string llvm_root_;
  ScopedEnv lib_, gpus_, cache_, llvm_, space_;
};

// Skips the test where nothing here builds `target` (gfx950 without LLVM >=
// 20); fails instead where FLYTUNE_EXPECT_TARGETS lists it (CI prepared it).
inline void skip_unless_buildable(const char* target) {
  auto backend = backend_for(*find_target(target));
  if (backend) return;
  const char* expected = std::getenv("FLYTUNE_EXPECT_TARGETS");
  if (expected && (std::string(",") + expected + ",").find(std::string(",") + target + ",") != std::string::npos)
    FAIL() << "FLYTUNE_EXPECT_TARGETS lists " << target << " but nothing here builds it: " << backend.error().describe();
  GTEST_SKIP() << "not compiled here: " << backend.error().describe();
}

// "<pid> <kernel>" from the double's fault marker (FLYTUNE_HIP_DOUBLE_FAULT_MARKER).
inline std::pair<pid_t, std::string> read_marker(const std::string& path) {
  std::istringstream in(read_bytes(path));
  pid_t pid = -1;
  std::string kernel;
  in >> pid >> kernel;
  return {pid, kernel};
}

// A search (the binary with `args`, its output in `log`) whose worker hangs
// once by `fault` (FLYTUNE_HIP_DOUBLE_FAULT, "hang@N:<kernel>"), killed with
// SIGKILL during the hang, and its worker too: the kernel that hung (empty,
// and the test failed, when the search ended first or nothing hung in 180 s).
inline std::string kill_search_during_hang(const std::vector<std::string>& args, const char* fault,
                                           const std::string& marker, const std::string& log) {
  pid_t search = -1;
  {
    const ScopedEnv hang("FLYTUNE_HIP_DOUBLE_FAULT", fault);
    const ScopedEnv once("FLYTUNE_HIP_DOUBLE_FAULT_MARKER", marker.c_str());
    search = spawn_flytune(args, log);
  }
  if (search <= 0) {
    ADD_FAILURE() << "the search did not start";
    return {};
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  int status = 0;
  // The marker is created, then its line written: wait for the line.
  while (read_marker(marker).second.empty() && std::chrono::steady_clock::now() < deadline) {
    if (waitpid(search, &status, WNOHANG) != 0) {
      ADD_FAILURE() << "the search ended before the hang:\n" << read_bytes(log);
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto [worker, kernel] = read_marker(marker);
  EXPECT_EQ(kill(search, SIGKILL), 0);
  EXPECT_EQ(waitpid(search, &status, 0), search);
  if (kernel.empty() || worker <= 0 || worker == search) {
    ADD_FAILURE() << "no hang in a worker within the deadline:\n" << read_bytes(log);
    return {};
  }
  EXPECT_EQ(kill(worker, SIGKILL), 0);  // not our child: it was the search's
  return kernel;
}

// The JSON summary at the end of `search --json` output (warnings may precede it).
inline nlohmann::json summary_of(const std::string& output) {
  const auto nl = output.find("\n{");
  const auto at = nl != std::string::npos ? nl + 1 : output.find('{');
  if (at == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(output.substr(at), nullptr, false);
}

}  // namespace ft::test

namespace ft::test {

// The same search run again after kill_search_during_hang: it must finish
// (exit 0) and note that it closed the killed run 1. Its JSON summary (null
// when it failed).
inline nlohmann::json resume_after_kill(const std::vector<std::string>& args) {
  auto r = run_flytune(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json sum = summary_of(r.output);
  EXPECT_TRUE(sum.is_object()) << r.output;
  if (r.exit_code != 0 || !sum.is_object()) return nullptr;
  bool noted = false;
  for (const auto& n : sum["notes"]) noted = noted || n.get<std::string>().find("run 1 was left 'running'") != std::string::npos;
  EXPECT_TRUE(noted) << sum["notes"].dump();
  return sum;
}

}  // namespace ft::test
