#pragma once
// What the tests that run flytune searches on the HIP test double share: the
// environment the binary and its workers inherit, and the JSON summary.
#include <sys/types.h>

#include <cstdlib>
#include <sstream>
#include <string>
#include <utility>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/target.hpp"

#include "compile/toolchain/toolchains.hpp"
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

// The JSON summary at the end of `search --json` output (warnings may precede it).
inline nlohmann::json summary_of(const std::string& output) {
  const auto nl = output.find("\n{");
  const auto at = nl != std::string::npos ? nl + 1 : output.find('{');
  if (at == std::string::npos) return nlohmann::json();
  return nlohmann::json::parse(output.substr(at), nullptr, false);
}

}  // namespace ft::test
