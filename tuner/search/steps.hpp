#pragma once
// The steps of a GPU search, each on one GPU (a Measurer) and writing through
// the Recorder: verify a variant, rank a stage kind at a token count by the
// strategy and record its winner, choose the layer's stage pair. search.cpp
// deals them to the GPUs; a step never compares timings of two GPUs.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "db/store.hpp"
#include "tuner/search/ceilings.hpp"
#include "tuner/search/compile_space.hpp"
#include "tuner/search/measurer.hpp"
#include "tuner/search/recorder.hpp"
#include "tuner/search/search.hpp"

namespace ft {

struct Candidate {
  const CompiledVariant* cv;
  std::int64_t id;
  nlohmann::json spec;  // {variant, code_object, entry}
};

using Ranked = std::vector<std::pair<double, const Candidate*>>;  // (time, candidate), fastest first

db::MeasurementStatus status_of(const Error& e);

// One GPU as the steps see it: its worker, what it reported, the device row
// of its model, and the ids every measurement row carries.
struct GpuContext {
  Measurer& m;
  DeviceInfo info;
  std::int64_t run_id = 0, problem_id = 0, device_id = 0, toolchain_id = 0;
  Recorder& rec;

  // One measurement row (timing and/or comparison from a worker's answer,
  // with the telemetry read beside it and this GPU's bus id).
  Status record(std::int64_t variant_id, int tokens, const std::string& phase, db::MeasurementStatus st,
                const nlohmann::json& result, const std::string& error, const nlohmann::json& tele);
};

// Verification of one variant at the search's verify token count (inputs
// already set): resumed from the store unless --force. The outcome, or
// nullopt when the GPU stopped before it could say.
enum class VerifyOutcome { passed, failed, crashed };
Result<std::optional<VerifyOutcome>> verify_one(const SearchConfig& cfg, GpuContext& gpu, const Candidate& c);

// A bucket's stage kinds ranked by the strategy (halving: 5 repetitions each,
// 30 for the best quarter, then A/B rounds of the best three; model: halving
// over the cost model's pick), each kind's winner recorded with its speedup
// over the default variant.
struct StageStep {
  const SearchConfig& cfg;
  const Target& target;
  GpuContext& gpu;
  const std::vector<Candidate>& candidates;
  std::mt19937_64 rng;
  bool many_gpus = false;  // other GPUs search beside this one (progress lines name the GPU)

  // The kind's candidates, fastest first (empty when none ran); nullopt when the GPU stopped.
  Result<std::optional<Ranked>> rank(KernelKind kind, int tokens, const nlohmann::json& tele);
  // The kind's winner (timed.front()) and its speedup over the default variant (timed the same way).
  Status record_winner(KernelKind kind, int tokens, const Ranked& timed, const nlohmann::json& tele);

 private:
  std::optional<double> time_one(const Candidate& c, const std::string& phase, int reps, int tokens,
                                 const nlohmann::json& tele);
  Result<std::vector<const Candidate*>> model_pool(KernelKind kind, int tokens, std::vector<const Candidate*> pool);
};

// The whole layer of a bucket: stages are tuned alone, but a layer pads every
// expert's rows to the row block of its pair, so the pair is chosen among the
// best of each stage by timing them together (the layer program's steps, as
// the runtime runs them) on this GPU; the fastest pair that passes
// verification at this token count is timed at length and recorded as the
// bucket's layer winner. A bucket that ends without one says why.
struct LayerStep {
  const SearchConfig& cfg;
  const Target& target;
  GpuContext& gpu;
  const std::optional<Ceilings>& ceilings;
  bool many_gpus = false;

  // false when the GPU stopped.
  Result<bool> run(int tokens, const Ranked& s1, const Ranked& s2, const nlohmann::json& tele);

 private:
  void no_layer(int tokens, const std::string& reason);
  std::string gpu_prefix() const { return many_gpus ? gpu.m.label() + ": " : ""; }
  Result<bool> try_pair(int tokens, const Candidate* c1, const Candidate* c2, const nlohmann::json& tele, std::string& why);
};

// The stage pairs worth timing as a layer: from the best few of each stage,
// in order of their summed stage times, those the layer program can run (the
// routed weight placed alike, row blocks that line up); why the last one left
// out was left out goes to `skipped`.
std::vector<std::pair<const Candidate*, const Candidate*>> layer_pairs(const Target& target, const Problem& problem,
                                                                       const Ranked& s1, const Ranked& s2,
                                                                       std::string& skipped);

}  // namespace ft
