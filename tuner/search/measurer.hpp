#pragma once
// The search's handle on one GPU: a `flytune worker` subprocess (crash
// isolation, tuner/worker/) that is restarted after a fault or a hang with the
// problem re-opened and the inputs re-sent. A worker that cannot be started
// again is dead: its requests fail at once and the search deals its work to
// the GPUs that are left.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "generator/error.hpp"
#include "tuner/worker/worker_process.hpp"

namespace ft {

class Measurer {
 public:
  // `stop`: set by the search when an error on another GPU ends it; a
  // stopped measurer (that, or Ctrl-C) restarts nothing.
  Measurer(std::string executable, std::string selector, const std::atomic<bool>& stop);

  // Starts the worker and asks for its device ({"device": {...}}).
  Result<nlohmann::json> start_and_query_device();

  // Opens the problem in the worker; restarts re-send it.
  Status open(nlohmann::json request);

  // Sends a request. A worker that died or hung is restarted (problem
  // re-opened, inputs re-sent) and the failure returned for the caller to
  // record; one that cannot be restarted leaves the measurer dead().
  Result<nlohmann::json> call(const nlohmann::json& req, std::chrono::milliseconds timeout);

  // Fresh inputs at `tokens` (X, weights, routing from `seed`); restarts re-send them.
  Status set_inputs(int tokens, std::uint64_t seed, int empty_experts);

  nlohmann::json telemetry();

  // The worker's selector ("cuda:1"; "" for the first GPU found).
  const std::string& selector() const { return selector_; }
  std::string label() const { return selector_.empty() ? "gpu" : selector_; }
  std::size_t crashes() const { return crashes_; }
  bool dead() const { return dead_; }
  // Work on this measurer should stop: the search is stopping, or the worker is dead.
  bool stopped() const;
  // Kills the worker process (tests; a search never needs to).
  pid_t worker_pid() const { return worker_.pid(); }

 private:
  Status restart();

  std::string exe_, selector_;
  const std::atomic<bool>& stop_;
  WorkerProcess worker_;
  nlohmann::json open_, inputs_;
  std::size_t crashes_ = 0;
  bool dead_ = false;
};

}  // namespace ft
