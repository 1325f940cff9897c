#include "measure/worker/worker_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <vector>

#include <fmt/format.h>

extern char** environ;

namespace ft {

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, std::size_t(n)) : std::string("flytune");
}

WorkerProcess::~WorkerProcess() { stop(); }

Status WorkerProcess::start(const std::string& exe, const std::string& selector) {
  stop();
  int in_pipe[2], out_pipe[2];
  if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
    return fail(Errc::io, fmt::format("pipe: {}", std::strerror(errno)), "worker");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in_pipe[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  std::vector<std::string> args{exe, "worker", "--device", selector};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, exe.c_str(), &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  close(in_pipe[0]);
  close(out_pipe[1]);
  if (rc != 0) {
    close(in_pipe[1]);
    close(out_pipe[0]);
    return fail(Errc::io, fmt::format("cannot start the worker: {}", std::strerror(rc)), exe);
  }
  signal(SIGPIPE, SIG_IGN);
  pid_ = pid;
  to_child_ = in_pipe[1];
  from_child_ = out_pipe[0];
  buffer_.clear();
  return {};
}

void WorkerProcess::stop() {
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
  to_child_ = from_child_ = -1;
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
}

std::string WorkerProcess::died_how() {
  int status = 0;
  std::string how = "the worker exited";
  if (pid_ > 0 && waitpid(pid_, &status, 0) == pid_) {
    if (WIFSIGNALED(status)) how = fmt::format("the worker died of signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else if (WIFEXITED(status)) how = fmt::format("the worker exited with code {}", WEXITSTATUS(status));
    pid_ = -1;
  }
  stop();
  return how;
}

namespace {

// Writes all of `text`; false when the reader is gone. A worker that died
// between requests must not raise SIGPIPE in the search, whose handler reads
// it as "the user's output pipe closed" and stops: SIGPIPE is blocked in this
// thread for the write, and the one it raised is taken back before unblocking.
bool write_all(int fd, const std::string& text) {
  sigset_t pipe_set, old;
  sigemptyset(&pipe_set);
  sigaddset(&pipe_set, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
  bool ok = true;
  for (std::size_t off = 0; off < text.size();) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ok = false;
      break;
    }
    off += std::size_t(n);
  }
  if (!ok && errno == EPIPE) {
    const timespec zero{0, 0};
    while (sigtimedwait(&pipe_set, nullptr, &zero) < 0 && errno == EINTR) {
    }
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return ok;
}

}  // namespace

Result<std::string> WorkerProcess::exchange(const std::string& request, std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return fail(Errc::device, "the worker is not running");
  if (request.find('\n') != std::string::npos) return fail(Errc::internal, "a request line holds a newline");
  if (!write_all(to_child_, request + "\n")) return fail(Errc::device, died_how());
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (auto nl = buffer_.find('\n'); nl != std::string::npos) {
      std::string answer = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return answer;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      stop();
      return fail(Errc::timeout, fmt::format("no answer within {} ms; the worker was killed", timeout.count()));
    }
    pollfd pfd{from_child_, POLLIN, 0};
    int pr = poll(&pfd, 1, int(std::min<long long>(left.count(), INT_MAX)));
    if (pr < 0 && errno == EINTR) continue;
    if (pr == 0) continue;
    char buf[65536];
    ssize_t n = read(from_child_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(Errc::device, died_how());
    buffer_.append(buf, std::size_t(n));
  }
}

}  // namespace ft
