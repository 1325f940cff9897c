#pragma once
// Runs the real flytune binary for CLI tests.
#include <string>
#include <vector>

#include "system/subprocess.hpp"

namespace ft::test {

inline ProcessOutput run_flytune(std::vector<std::string> args, const std::string& input = {}) {
  args.insert(args.begin(), FLYTUNE_BIN);
  auto r = run_capture(args, input, std::chrono::minutes(10));
  if (!r) return ProcessOutput{-1, 0, false, r.error().describe()};
  return *r;
}

}  // namespace ft::test
