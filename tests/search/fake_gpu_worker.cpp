// A stand-in for `flytune worker` on machines without GPUs: it speaks the
// worker protocol (tuner/worker/worker_service.hpp) with made-up devices and
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
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace {

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

nlohmann::json timing(double t) {
  return {{"median_us", t}, {"p10_us", t * 0.99}, {"p90_us", t * 1.01}, {"min_us", t * 0.98}, {"samples", 10}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string selector;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--device") selector = argv[i + 1];
  const std::string state = env("FT_FAKE_STATE");
  const std::filesystem::path marker = std::filesystem::path(state) / ("killed-" + selector);
  const bool was_killed = !state.empty() && std::filesystem::exists(marker);
  if (was_killed && env("FT_FAKE_DEAD") == "1") return 7;

  int kill_at = -1;
  if (const std::string k = env("FT_FAKE_KILL"); !was_killed && k.rfind(selector + ":", 0) == 0 && !selector.empty())
    kill_at = std::stoi(k.substr(selector.size() + 1));
  std::string model = "Fake H200";
  if (const std::string m = env("FT_FAKE_MODEL"); m.rfind(selector + "=", 0) == 0) model = m.substr(selector.size() + 1);
  const std::string ordinal = selector.substr(selector.find(':') + 1);
  const std::string pci = env("FT_FAKE_PCI") == "same" ? "0000:01:00.0" : "0000:" + ordinal + "1:00.0";

  int timings = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    const nlohmann::json req = nlohmann::json::parse(line);
    const std::string op = req.at("op");
    nlohmann::json out = nlohmann::json::object();
    if (op == "device") {
      out["device"] = {{"runtime", "cuda"}, {"ordinal", std::stoi(ordinal)}, {"name", model}, {"arch", "sm_90a"},
                       {"compute_units", 132}, {"memory_bytes", 1ull << 37}, {"l2_bytes", 50u << 20},
                       {"max_shared_per_block", 232448}, {"clock_mhz", 1980}, {"driver_version", "fake"},
                       {"runtime_version", "13.0"}, {"pci_bus_id", pci}};
    } else if (op == "verify" || op == "verify_layer") {
      out = {{"passed", true}, {"rel_l2", 1e-3}, {"max_abs", 1e-2}, {"summary", "rel_l2 1e-3 (fake)"}};
    } else if (op == "time" || op == "time_layer") {
      if (++timings == kill_at) {
        std::ofstream(marker) << "killed\n";
        kill(getpid(), SIGKILL);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));  // lets the other GPUs take work
      if (op == "time") {
        out = timing(time_of(req.at("entry")));
      } else {
        const double t1 = time_of(req.at("stage1").at("entry")), t2 = time_of(req.at("stage2").at("entry"));
        out = {{"total", timing(t1 + t2 + 5)}, {"align", timing(2)}, {"stage1", timing(t1)},
               {"stage2", timing(t2)}, {"reduce", timing(3)}};
      }
    }
    // open, inputs, telemetry: nothing to say.
    out["ok"] = true;
    std::cout << out.dump() << '\n' << std::flush;
  }
  return 0;
}
