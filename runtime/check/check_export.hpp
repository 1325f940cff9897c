#pragma once
// flytune check-export: an export run through libflytune_runtime itself, the
// way a user's program runs it, on inputs the search never saw. For every
// problem and token count (each bucket's T, an odd T below it, T between
// buckets and above the largest) and every routing (uniform, hot, zipf, one
// expert empty, slots masked with -1), with every output and workspace buffer
// poisoned first: the layer through ft_plan_launch_checked against the support
// unit's reference kernels.
//
// On a GPU the export's own code objects run. With `emulate` each exported
// kernel is regenerated from the manifest's stage variants for the CPU
// emulator, and the runtime executes the manifest's steps on it: the launch
// rules are checked without a GPU (the GPU code objects are not). An export
// of a search on the emulator (code_object_format "so") holds host libraries:
// with `emulate` those very files run.
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"

struct ft_runtime;  // flytune_runtime.h

namespace ft {
class Device;
}

namespace ft::check {

struct CheckOptions {
  std::string dir;
  bool emulate = false;
  std::string device;                  // GPU selector ("cuda:0"); "": the first GPU
  std::optional<std::string> problem;  // only this problem key
  std::vector<int> tokens;             // empty: check_tokens() of each problem's buckets
  std::vector<std::string> routings{"uniform", "hot", "zipf", "one-empty", "masked"};
  std::uint64_t seed = 0x5eed;
  bool graph = false;  // capture ft_plan_launch into a graph and replay it (the launch must not synchronise)
};

struct CheckRow {
  std::string problem;
  int bucket = 0;
  int tokens = 0;
  std::string routing;
  bool passed = false;
  double rel_l2 = 0;
  std::string summary;  // the comparison, or what failed
  std::string pass = "forward";  // or "backward" (backward_check.hpp)
};

struct CheckReport {
  std::string target;
  std::string device;  // what ran it ("NVIDIA H200", "CPU emulator (sm_90a)")
  bool own_objects = true;  // the export's own code objects ran (false: kernels rebuilt for the emulator)
  std::vector<CheckRow> rows;
  // "<problem>: <ft_plan_coverage_note>" for each checked T the runtime serves
  // with another bucket's kernels (above the largest, or a missing bucket).
  std::vector<std::string> coverage_notes;
  int failures() const;
  std::string table() const;  // one line per row, aligned
};

// The token counts worth checking for tuned buckets (ascending): each bucket,
// an odd count below it, one between neighbouring buckets, one above the largest.
std::vector<int> check_tokens(const std::vector<int>& buckets);

// Errc::usage for an unknown routing; an export the runtime refuses keeps the
// runtime's error. A failing comparison is a row, not an error.
Result<CheckReport> check_export(const CheckOptions& options);

// The export opened through the C API on the CPU emulator of its target, as
// check_export's `emulate` does (an export of a search on the emulator runs
// its own host libraries; a GPU export's kernels are rebuilt from the
// manifest). `wrap`, when given, receives the emulator and returns the Device
// the runtime runs on (the tests' fault-injecting and counting devices). Close
// it with ft_runtime_close.
using DeviceWrap = std::function<std::unique_ptr<Device>(std::unique_ptr<Device>)>;
Result<struct ::ft_runtime*> open_on_emulator(const std::string& dir, const DeviceWrap& wrap = {});

}  // namespace ft::check
