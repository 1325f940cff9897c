#pragma once
// The measuring service: it owns one device (a GPU or the CPU emulator of a
// target, worker_device.hpp) and answers the typed requests of
// measure/worker/protocol.hpp -- open a problem for an operation, set inputs,
// verify and time its programs (a forward stage alone too) on the operation's
// ProgramBench (measure/program_bench.hpp), read telemetry. The code objects it loads must be
// built for that device (host libraries from Backend::emulate for the
// emulator).
//
// The one implementation of the service: `flytune worker` runs it in a
// process of its own behind JSON lines (serve_worker: if a kernel faults or
// hangs, only that process dies and the search restarts it), and the search's
// in-process measurer calls handle() directly (search/measurer.hpp).
// After a device error the service should be dropped: the GPU context may be
// unusable (the worker process exits; the in-process measurer opens a fresh one).
#include <functional>
#include <istream>
#include <memory>
#include <ostream>
#include <string>

#include "base/error.hpp"
#include "device/device.hpp"
#include "measure/worker/protocol.hpp"

namespace ft {

class WorkerService {
 public:
  using DeviceFactory = std::function<Result<std::unique_ptr<Device>>()>;
  // The device a selector names (cuda:N, hip:N, emu:<target>[:<n>]), opened on the first request that needs it.
  explicit WorkerService(std::string device_selector);
  // Any device, opened by `open` on the first request that needs it.
  explicit WorkerService(DeviceFactory open);
  ~WorkerService();
  WorkerService(const WorkerService&) = delete;
  WorkerService& operator=(const WorkerService&) = delete;

  // The answer to one request (its Answer alternative), or the error.
  Result<protocol::Answer> handle(const protocol::Request& request);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Reads request lines from `in` until EOF, answering each with one line on
// `out`. Returns 0 at EOF, 3 after answering a device error.
int serve_worker(const std::string& device_selector, std::istream& in, std::ostream& out);

}  // namespace ft
