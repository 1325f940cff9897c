#pragma once
// Running another program (clang, a worker) and collecting what it printed.
#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace ft {

struct ProcessOutput {
  int exit_code = -1;      // -1 when killed by a signal
  int signal = 0;          // the signal that ended it, if any
  bool timed_out = false;
  std::string output;      // stdout and stderr, interleaved
};

// Absolute path of an executable: `name` itself when it contains '/', else the
// first match on PATH.
Result<std::string> find_executable(const std::string& name);

// Runs argv[0] with the given arguments (no shell), optionally feeding `input`
// on stdin, and waits at most `timeout` (killing the process group after it).
Result<ProcessOutput> run_capture(const std::vector<std::string>& argv, const std::string& input = {},
                                  std::optional<std::chrono::milliseconds> timeout = std::nullopt);

// Whether the process with this id still runs on this machine: false for a pid
// that no longer exists or, when `expected_comm` is given, that the system
// reused for another program (its /proc/PID/comm differs). Used to find runs
// and temporary folders left behind by a killed search.
bool process_alive(long pid, std::string_view expected_comm = {});
// This process's name as /proc/self/comm gives it ("flytune"); empty if unknown.
std::string own_process_name();

}  // namespace ft
