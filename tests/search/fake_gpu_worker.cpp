// A stand-in for `flytune worker` on machines without GPUs: it speaks the
// worker protocol (measure/worker/protocol.hpp, its own encoding) with made-up devices and
// timings, so the search's handling of several GPUs -- dealing work, a worker
// killed mid-search, a GPU that stays dead, GPUs of different models -- runs
// in CI. Kernels are not run: verification passes and a variant's time is a
// fixed function of its name (the same on every GPU), so a search on one fake
// GPU and on several must pick the same winners.
//
// Invoked as `fake_gpu_worker worker --device SEL`. Environment:
//   FT_FAKE_STATE   folder for marker files (required for the two below)
//   FT_FAKE_KILL    "SEL:N": the worker of SEL kills itself (SIGKILL) on its
//                   N-th timing request, once (a marker file remembers it)
//   FT_FAKE_DEAD    "1": after that kill, SEL's workers exit at start (the GPU is gone)
//   FT_FAKE_MODEL   "SEL=NAME": SEL reports the model NAME instead of "Fake H200"
//   FT_FAKE_PCI     "same": every GPU reports one bus id
//   FT_FAKE_PROTOCOL N: the device answer names protocol version N (a worker of another build)
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "measure/worker/protocol.hpp"

namespace {

using namespace ft;

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

// FNV-1a: a time in [10, 110) us that depends on the kernel name only.
double time_of(const std::string& entry) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : entry) h = (h ^ c) * 1099511628211ull;
  return 10.0 + double(h % 1000) / 10.0;
}

Timing timing(double t) { return {t, t * 0.99, t * 1.01, t * 0.98, 10}; }

struct Fake {
  std::string selector, model, ordinal, pci;
  int protocol = protocol::kVersion;
  int kill_at = -1, timings = 0;
  std::filesystem::path marker;

  // Timing requests count towards FT_FAKE_KILL's N.
  void maybe_die() {
    if (++timings == kill_at) {
      std::ofstream(marker) << "killed\n";
      kill(getpid(), SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));  // lets the other GPUs take work
  }

  protocol::Answer operator()(const protocol::DeviceRequest&) {
    DeviceInfo d{"cuda", std::stoi(ordinal), model, "sm_90a", 132, std::size_t(1) << 37, std::size_t(50) << 20,
                 232448, 1980, "fake", "13.0", pci};
    return protocol::DeviceAnswer{protocol, d};
  }
  protocol::Answer operator()(const protocol::VerifyRequest&) { return verified(); }
  protocol::Answer operator()(const protocol::VerifyProgramRequest&) { return verified(); }
  protocol::Answer operator()(const protocol::TimeRequest& r) {
    maybe_die();
    return timing(time_of(r.kernel.entry));
  }
  // The forward's layers (the searches of these tests time no backward).
  protocol::Answer operator()(const protocol::TimeProgramRequest& r) {
    maybe_die();
    const double t1 = time_of(r.program.stages.at(0).entry), t2 = time_of(r.program.stages.at(1).entry);
    return ProgramTiming{timing(t1 + t2 + 5),
                         {{"align", timing(2)}, {"stage1", timing(t1)}, {"stage2", timing(t2)}, {"reduce", timing(3)}}};
  }
  protocol::Answer operator()(const protocol::TelemetryRequest&) { return protocol::TelemetryAnswer{{}, "fake GPU"}; }
  // open, inputs, fault: nothing to say.
  template <class R>
  protocol::Answer operator()(const R&) {
    return protocol::Done{};
  }
  static protocol::Answer verified() { return protocol::VerifyAnswer{true, 1e-3, 1e-2, "rel_l2 1e-3 (fake)"}; }
};

}  // namespace

int main(int argc, char** argv) {
  Fake fake;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--device") fake.selector = argv[i + 1];
  const std::string& selector = fake.selector;
  const std::string state = env("FT_FAKE_STATE");
  fake.marker = std::filesystem::path(state) / ("killed-" + selector);
  const bool was_killed = !state.empty() && std::filesystem::exists(fake.marker);
  if (was_killed && env("FT_FAKE_DEAD") == "1") return 7;

  if (const std::string k = env("FT_FAKE_KILL"); !was_killed && k.rfind(selector + ":", 0) == 0 && !selector.empty())
    fake.kill_at = std::stoi(k.substr(selector.size() + 1));
  fake.model = "Fake H200";
  if (const std::string m = env("FT_FAKE_MODEL"); m.rfind(selector + "=", 0) == 0) fake.model = m.substr(selector.size() + 1);
  if (const std::string v = env("FT_FAKE_PROTOCOL"); !v.empty()) fake.protocol = std::stoi(v);
  fake.ordinal = selector.substr(selector.find(':') + 1);
  fake.pci = env("FT_FAKE_PCI") == "same" ? "0000:01:00.0" : "0000:" + fake.ordinal + "1:00.0";

  std::string line;
  while (std::getline(std::cin, line)) {
    auto message = protocol::parse_line(line);
    auto request = message ? protocol::decode_request(*message) : std::unexpected(message.error());
    const nlohmann::json answer =
        request ? protocol::encode(std::visit(fake, *request)) : protocol::encode_failure(request.error());
    std::cout << protocol::to_line(answer) << '\n' << std::flush;
  }
  return 0;
}
