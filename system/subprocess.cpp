#include "system/subprocess.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <fstream>

#include <fmt/format.h>

extern char** environ;

namespace ft {

Result<std::string> find_executable(const std::string& name) {
  auto runnable = [](const std::string& p) { return access(p.c_str(), X_OK) == 0; };
  if (name.find('/') != std::string::npos) {
    if (runnable(name)) return name;
    return fail(Errc::not_found, "not an executable file", name);
  }
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!rest.empty()) {
    auto colon = rest.find(':');
    std::string dir(rest.substr(0, colon));
    if (!dir.empty()) {
      std::string candidate = dir + "/" + name;
      if (runnable(candidate)) return candidate;
    }
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return fail(Errc::not_found, "not found on PATH", name);
}

Result<ProcessOutput> run_capture(const std::vector<std::string>& argv, const std::string& input,
                                  std::optional<std::chrono::milliseconds> timeout) {
  if (argv.empty()) return fail(Errc::internal, "run_capture without a program");
  int out_pipe[2], in_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(in_pipe, O_CLOEXEC) != 0)
    return fail(Errc::io, fmt::format("pipe: {}", std::strerror(errno)), argv[0]);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);  // so a timeout kills the whole group
  posix_spawnattr_setpgroup(&attr, 0);

  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (rc != 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    return fail(Errc::io, fmt::format("cannot start: {}", std::strerror(rc)), argv[0]);
  }

  // Feed stdin (small inputs only) then close it so the child sees EOF.
  size_t written = 0;
  signal(SIGPIPE, SIG_IGN);
  while (written < input.size()) {
    ssize_t n = write(in_pipe[1], input.data() + written, input.size() - written);
    if (n <= 0) break;
    written += size_t(n);
  }
  close(in_pipe[1]);

  ProcessOutput result;
  auto deadline = timeout ? std::chrono::steady_clock::now() + *timeout : std::chrono::steady_clock::time_point::max();
  char buf[65536];
  for (;;) {
    int wait_ms = -1;
    if (timeout) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait_ms = int(std::max<long long>(0, left.count()));
    }
    pollfd pfd{out_pipe[0], POLLIN, 0};
    int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
    ssize_t n = read(out_pipe[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    result.output.append(buf, size_t(n));
  }
  close(out_pipe[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.signal = WTERMSIG(status);
  return result;
}

bool process_alive(long pid, std::string_view expected_comm) {
  if (pid <= 0) return false;
  if (pid == long(::getpid())) return true;
  if (::kill(pid_t(pid), 0) != 0 && errno != EPERM) return false;
  if (expected_comm.empty()) return true;
  std::ifstream comm(fmt::format("/proc/{}/comm", pid));
  std::string name;
  // Without /proc the pid's existence is all there is to go on.
  if (!comm || !std::getline(comm, name)) return true;
  return name == expected_comm;
}

std::string own_process_name() {
  std::ifstream comm("/proc/self/comm");
  std::string name;
  if (!comm || !std::getline(comm, name)) return {};
  return name;
}

}  // namespace ft
