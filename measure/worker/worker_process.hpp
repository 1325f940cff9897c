#pragma once
// The search's side of crash isolation: a `flytune worker` subprocess with a
// line pipe each way and a watchdog. A request that outlives its deadline
// kills the worker (Errc::timeout); a worker that dies answers Errc::device
// with how it died. start() again after either. What the lines say is the
// protocol's (protocol.hpp); this only carries them.
#include <chrono>
#include <string>
#include <sys/types.h>

#include "base/error.hpp"

namespace ft {

class WorkerProcess {
 public:
  WorkerProcess() = default;
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  // Runs `executable worker --device <selector>`.
  Status start(const std::string& executable, const std::string& device_selector);
  void stop();
  bool running() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }

  // Sends one line (no newline inside) and waits for the answer line.
  Result<std::string> exchange(const std::string& line, std::chrono::milliseconds timeout);

 private:
  std::string died_how();
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
  std::string buffer_;
};

// This program's own path (/proc/self/exe), to start workers with.
std::string self_executable();

}  // namespace ft
