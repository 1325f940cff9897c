#pragma once
// Runs the real flytune binary for CLI tests.
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "system/subprocess.hpp"

extern char** environ;

namespace ft::test {

inline ProcessOutput run_flytune(std::vector<std::string> args, const std::string& input = {}) {
  args.insert(args.begin(), FLYTUNE_BIN);
  auto r = run_capture(args, input, std::chrono::minutes(10));
  if (!r) return ProcessOutput{-1, 0, false, r.error().describe()};
  return *r;
}

// Starts `flytune args...` with its output (both streams) in `log`, not
// waiting for it; the process id, or -1.
inline pid_t spawn_flytune(const std::vector<std::string>& args, const std::string& log) {
  std::vector<std::string> all{FLYTUNE_BIN};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, FLYTUNE_BIN, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

}  // namespace ft::test
