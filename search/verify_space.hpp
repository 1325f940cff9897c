#pragma once
// flytune verify: every variant of a space checked against the reference on
// fresh random inputs at several token counts, on a GPU or on the CPU
// emulator, together with the align/sort kernel (against the CPU) and the
// device reference itself (against the CPU reference, on small inputs).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "generator/problem.hpp"
#include "generator/space.hpp"
#include "generator/target.hpp"

namespace ft {

struct VerifyConfig {
  Problem problem;
  std::string target;                   // "" with a GPU: the GPU's own
  SpaceOptions space;
  std::vector<std::string> variants;    // only these kernel names (empty: the whole space)
  std::vector<int> tokens{1, 7, 16, 64, 333, 512, 4096};
  bool emulate = false;
  std::string device_selector;
  std::uint64_t seed = 0;               // 0: fresh
  bool progress = true;
  // Check the device reference against the CPU reference for token counts up
  // to this (the CPU reference is slow on big shapes).
  int cpu_reference_max_tokens = 16;
};

struct VerifyRow {
  std::string check;                    // kernel name, "align", "reference"
  int tokens = 0;
  bool passed = false;
  double rel_l2 = 0, max_abs = 0;
  std::string detail;
};

struct VerifyReport {
  std::string device;
  std::string target;
  std::vector<VerifyRow> rows;
  std::size_t failures = 0;
  std::size_t skipped = 0;              // variants pruned or not compiled
  double seconds = 0;
  nlohmann::json to_json() const;
};

Result<VerifyReport> verify_space(const VerifyConfig& config);

}  // namespace ft
