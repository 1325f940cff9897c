#pragma once
// The search's handle on one device: what the search's steps ask of it
// (verify and time stage kernels and any operation's programs -- the
// forward's layers, the backward's --, fresh inputs, telemetry), in the typed requests of measure/worker/protocol.hpp.
//
// Two implementations run the one measuring service (WorkerService):
//   make_worker_measurer      in a `flytune worker` subprocess: crash
//                             isolation, a watchdog per request (hangs kill
//                             the worker), restarts;
//   make_in_process_measurer  in this process on any Device (a GPU or the
//                             CPU emulator): no fork, no watchdog, a kernel
//                             that faults takes the search down -- for tests
//                             and `flytune search --in-process`.
// Both restart their service after a fault (problem re-opened, inputs
// re-sent) and count it; one that cannot be restarted twice in a row is
// dead: its requests fail at once and the search deals its work to the
// devices that are left. Tests implement Measurer with made-up devices.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/error.hpp"
#include "measure/worker/protocol.hpp"
#include "measure/worker/worker_service.hpp"

namespace ft {

class Measurer {
 public:
  virtual ~Measurer() = default;

  // Starts measuring and asks for the device. A worker of another protocol
  // version is refused here.
  virtual Result<DeviceInfo> start() = 0;
  // Opens the problem; restarts re-send it.
  virtual Status open(const protocol::OpenRequest& request) = 0;
  // Fresh inputs; restarts re-send them.
  virtual Status set_inputs(const protocol::InputsRequest& request) = 0;

  // A failure is the request's to record (its Errc says how: verify, timeout,
  // device); after a crash the service is restarted before the next request.
  virtual Result<protocol::VerifyAnswer> verify(const protocol::VerifyRequest& request) = 0;
  virtual Result<Timing> time(const protocol::TimeRequest& request) = 0;
  // An operation's program (of the operation the problem was opened for):
  // the forward's layer, the backward's program.
  virtual Result<protocol::VerifyAnswer> verify_program(const protocol::VerifyProgramRequest& request) = 0;
  virtual Result<ProgramTiming> time_program(const protocol::TimeProgramRequest& request) = 0;
  // Clocks and temperature where readable; empty when not (never an error).
  virtual TelemetryReading telemetry() = 0;

  // The device's selector ("cuda:1"; "" for the first GPU found).
  virtual const std::string& selector() const = 0;
  std::string label() const { return selector().empty() ? "gpu" : selector(); }
  // How often the service died, hung or hit a device error.
  virtual std::size_t crashes() const = 0;
  // The service could not be restarted.
  virtual bool dead() const = 0;
  // Work on this measurer should stop: the search is stopping (the stop flag
  // or Ctrl-C), or the measurer is dead.
  virtual bool stopped() const = 0;
};

// `stop`: set by the search when an error on another device ends it; a
// stopped measurer restarts nothing. `executable` empty: this program.
std::unique_ptr<Measurer> make_worker_measurer(std::string executable, std::string selector,
                                               const std::atomic<bool>& stop);
// The service in this process on the device `open` gives (opened again after
// a device error); `selector` names it in messages and summaries.
std::unique_ptr<Measurer> make_in_process_measurer(WorkerService::DeviceFactory open, std::string selector,
                                                   const std::atomic<bool>& stop);
// The same on the device a selector names (worker_device.hpp: cuda:N, hip:N, emu:<target>[:<n>]).
std::unique_ptr<Measurer> make_in_process_measurer(std::string selector, const std::atomic<bool>& stop);

}  // namespace ft
