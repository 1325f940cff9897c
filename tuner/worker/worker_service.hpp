#pragma once
// The measuring side of crash isolation: a `flytune worker` process owns the
// GPU and answers one JSON request per line with one JSON line. If a kernel
// faults or hangs, only this process dies; the search restarts it. Its device
// is a GPU or the CPU emulator of a target, by selector (worker_device.hpp:
// cuda:N, hip:N, emu:<target>[:<n>]); the code objects it loads must be built
// for that device (host libraries from Backend::emulate for the emulator).
//
// Requests ({"op": ...}):
//   device                                   -> {"device": {...}}
//   open   {problem, target, support, max_tokens}
//   inputs {tokens, seed, empty_experts}     fresh X, W1, W2 and routing
//   verify {variant, code_object, entry}     -> {passed, rel_l2, max_abs, summary}
//   time   {variant, code_object, entry, warmup, reps, flush_l2} -> {median_us, p10_us, p90_us, min_us, samples}
//   verify_layer / time_layer {stage1: {variant, code_object, entry}, stage2: {...}, reps, graph}
//   telemetry                                -> {sm_clock_mhz, mem_clock_mhz, temperature_c}
//   fault                                    a launch through an invalid address (tests)
// After answering a device error the worker exits: the GPU context may be unusable.
// Every answer has "ok"; failures carry "error" and "code".
#include <istream>
#include <memory>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "generator/error.hpp"

namespace ft {

class WorkerService {
 public:
  explicit WorkerService(std::string device_selector);
  ~WorkerService();
  nlohmann::json handle(const nlohmann::json& request);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Reads requests from `in` until EOF, answering on `out`.
int serve_worker(const std::string& device_selector, std::istream& in, std::ostream& out);

}  // namespace ft
