#pragma once
// The golden-file check of the generated instantiation units (emitter_test.cpp,
// backward_gemm_test.cpp): tests/golden/<name>.cpp must hold the unit's text.
// Refresh with FLYTUNE_UPDATE_GOLDEN=1.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "generator/kernel_source.hpp"

namespace ft::test {

inline std::string golden_path(const std::string& name) { return std::string(FT_TEST_SOURCE_DIR) + "/tests/golden/" + name + ".cpp"; }

inline void check_golden(const KernelSource& src) {
  const std::string path = golden_path(src.name);
  if (const char* u = std::getenv("FLYTUNE_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << src.text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing golden file " << path << " (run with FLYTUNE_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), src.text) << "generated source for " << src.name << " changed; if intended, refresh "
                                << "with FLYTUNE_UPDATE_GOLDEN=1";
}

}  // namespace ft::test
