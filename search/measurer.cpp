#include "search/measurer.hpp"

#include <chrono>
#include <optional>

#include <fmt/format.h>

#include "search/search.hpp"
#include "measure/worker/worker_device.hpp"
#include "measure/worker/worker_process.hpp"

namespace ft {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;

// How requests reach the service: through a worker's pipe, or by a call.
class Link {
 public:
  virtual ~Link() = default;
  virtual Status start() = 0;
  virtual void stop() = 0;
  virtual bool running() const = 0;
  // The answer, or the error: the service's own, or how the link broke
  // (Errc::device: the service died; Errc::timeout: it hung and was killed).
  virtual Result<protocol::Answer> send(const protocol::Request& request, milliseconds timeout) = 0;
};

// A `flytune worker` subprocess, one JSON line each way.
class WorkerLink final : public Link {
 public:
  WorkerLink(std::string exe, std::string selector) : exe_(std::move(exe)), selector_(std::move(selector)) {}
  Status start() override {
    FT_CHECK(process_.start(exe_, selector_));
    return {};
  }
  void stop() override { process_.stop(); }
  bool running() const override { return process_.running(); }
  Result<protocol::Answer> send(const protocol::Request& request, milliseconds timeout) override {
    const std::string line = FT_TRY(process_.exchange(protocol::to_line(protocol::encode(request)), timeout));
    auto message = protocol::parse_line(line);
    auto answer = message ? protocol::decode_answer_to(request, *message) : std::unexpected(message.error());
    if (answer || (message && protocol::is_failure(*message))) return answer;
    if (std::holds_alternative<protocol::DeviceRequest>(request))
      return std::unexpected(with_context(answer.error(), fmt::format("worker {}", exe_)));
    // Out of step with this search (another build, or stray output on its
    // stdout): a broken worker, ended like one that died.
    process_.stop();
    return fail(Errc::device, fmt::format("the worker's answer to '{}' cannot be read: {}", protocol::op_name(request),
                                          answer.error().describe()));
  }

 private:
  std::string exe_, selector_;
  WorkerProcess process_;
};

// The service in this process; dropped after a device error, as a worker ends.
class ServiceLink final : public Link {
 public:
  explicit ServiceLink(WorkerService::DeviceFactory open) : open_(std::move(open)) {}
  Status start() override {
    service_ = std::make_unique<WorkerService>(open_);
    return {};
  }
  void stop() override { service_.reset(); }
  bool running() const override { return service_ != nullptr; }
  Result<protocol::Answer> send(const protocol::Request& request, milliseconds) override {
    if (!service_) return fail(Errc::device, "the measuring service is not running");
    auto answer = service_->handle(request);
    if (!answer && answer.error().code == Errc::device) service_.reset();
    return answer;
  }

 private:
  WorkerService::DeviceFactory open_;
  std::unique_ptr<WorkerService> service_;
};

// The restarts, replays and bookkeeping both kinds of measurer share.
class SessionMeasurer final : public Measurer {
 public:
  SessionMeasurer(std::unique_ptr<Link> link, std::string selector, const std::atomic<bool>& stop)
      : link_(std::move(link)), selector_(std::move(selector)), stop_(stop) {}
  ~SessionMeasurer() override { link_->stop(); }

  Result<DeviceInfo> start() override {
    FT_CHECK(link_->start());
    const protocol::DeviceAnswer a = FT_TRY(send<protocol::DeviceRequest>({}, 120s));
    return a.device;
  }
  Status open(const protocol::OpenRequest& request) override {
    open_ = request;
    (void)FT_TRY(call(*open_, 300s));
    return {};
  }
  Status set_inputs(const protocol::InputsRequest& request) override {
    inputs_ = request;
    (void)FT_TRY(call(*inputs_, 300s));
    return {};
  }
  Result<protocol::VerifyAnswer> verify(const protocol::VerifyRequest& r) override { return call(r, 120s); }
  Result<Timing> time(const protocol::TimeRequest& r) override { return call(r, 120s); }
  Result<protocol::VerifyAnswer> verify_program(const protocol::VerifyProgramRequest& r) override { return call(r, 600s); }
  // A backward program runs longer than a forward layer (four GEMMs at most sizes).
  Result<ProgramTiming> time_program(const protocol::TimeProgramRequest& r) override {
    return call(r, r.program.operation->grad.empty() ? 300s : 600s);
  }
  TelemetryReading telemetry() override {
    if (dead_ || !link_->running()) return {};
    auto a = send<protocol::TelemetryRequest>({}, 10s);
    return a ? a->reading : TelemetryReading{};
  }

  const std::string& selector() const override { return selector_; }
  std::size_t crashes() const override { return crashes_; }
  bool dead() const override { return dead_; }
  bool stopped() const override { return dead_ || stop_.load() || interrupted(); }

 private:
  // One request, its answer of the type it names.
  template <class R>
  Result<typename R::Answer> send(const R& request, milliseconds timeout) {
    protocol::Answer a = FT_TRY(link_->send(request, timeout));
    if (auto* typed = std::get_if<typename R::Answer>(&a)) return std::move(*typed);
    return fail(Errc::internal, fmt::format("the answer to '{}' is of another kind", protocol::op_name(request)));
  }

  // A request on a running service: restarted first if it is not. A service
  // that died, hung or hit a device error is restarted for the next request;
  // the failure is this request's to record.
  template <class R>
  Result<typename R::Answer> call(const R& request, milliseconds timeout) {
    if (dead_) return fail(Errc::no_device, fmt::format("the worker on {} is dead", label()));
    if (!link_->running()) FT_CHECK(restart());
    auto r = send(request, timeout);
    if (!r && (r.error().code == Errc::timeout || r.error().code == Errc::device || !link_->running())) {
      ++crashes_;
      // One that cannot be restarted leaves this measurer dead() for the next request.
      if (!stop_.load() && !interrupted()) (void)restart();
    }
    return r;
  }

  Status restart();

  std::unique_ptr<Link> link_;
  std::string selector_;
  const std::atomic<bool>& stop_;
  std::optional<protocol::OpenRequest> open_;
  std::optional<protocol::InputsRequest> inputs_;
  std::size_t crashes_ = 0;
  bool dead_ = false;
};

Status SessionMeasurer::restart() {
  // Two tries: a worker may die of what its predecessor left behind (a GPU
  // still resetting); a third failure in a row means the GPU is gone.
  Status last;
  for (int attempt = 0; attempt < 2; ++attempt) {
    last = [&]() -> Status {
      FT_CHECK(link_->start());
      if (open_) (void)FT_TRY(send(*open_, 300s));
      if (inputs_) (void)FT_TRY(send(*inputs_, 300s));
      return {};
    }();
    if (last) return last;
    link_->stop();
  }
  dead_ = true;
  return std::unexpected(with_context(last.error(), fmt::format("the worker on {} could not be restarted", label())));
}

}  // namespace

std::unique_ptr<Measurer> make_worker_measurer(std::string executable, std::string selector,
                                               const std::atomic<bool>& stop) {
  auto link = std::make_unique<WorkerLink>(executable.empty() ? self_executable() : std::move(executable), selector);
  return std::make_unique<SessionMeasurer>(std::move(link), std::move(selector), stop);
}

std::unique_ptr<Measurer> make_in_process_measurer(WorkerService::DeviceFactory open, std::string selector,
                                                   const std::atomic<bool>& stop) {
  return std::make_unique<SessionMeasurer>(std::make_unique<ServiceLink>(std::move(open)), std::move(selector), stop);
}

std::unique_ptr<Measurer> make_in_process_measurer(std::string selector, const std::atomic<bool>& stop) {
  WorkerService::DeviceFactory open = [selector] { return open_worker_device(selector); };
  return make_in_process_measurer(std::move(open), std::move(selector), stop);
}

}  // namespace ft
