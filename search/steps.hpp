#pragma once
// The steps of a search on a device, each on one device (a Measurer) and
// writing through the Recorder: verify a variant, rank a stage kind at a
// token count by the strategy and record its winner, choose the layer's
// stage pair. search.cpp deals them to the devices; a step never compares
// timings of two devices.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "store/store.hpp"
#include "search/ceilings.hpp"
#include "search/measurer.hpp"
#include "search/recorder.hpp"
#include "search/search.hpp"
#include "search/strategy.hpp"

namespace ft {

db::MeasurementStatus status_of(const Error& e);

// The target of a device's arch, which --target (when given) must name.
Result<const Target*> target_of_gpu(const SearchConfig& cfg, const DeviceInfo& info);

// What one measurement row holds beside its keys: a timing and/or a comparison.
struct Measured {
  std::optional<Timing> timing;
  std::optional<protocol::VerifyAnswer> comparison;
};

// One measurement row: its keys, outcome, what the result holds and the
// telemetry read beside it (the caller adds the device's bus id).
db::MeasurementRecord measurement_row(const db::MeasurementKey& key, std::int64_t run_id, std::string_view phase,
                                      db::MeasurementStatus st, const Measured& result, const std::string& error,
                                      const TelemetryReading& tele);

// One device as the steps see it: its measurer, what it reported, the device
// row of its model, and the ids every measurement row carries.
struct GpuContext {
  Measurer& m;
  DeviceInfo info;
  std::int64_t run_id = 0, problem_id = 0, device_id = 0, toolchain_id = 0;
  Recorder& rec;

  // One measurement row, with the telemetry read beside it and this device's bus id.
  Status record(std::int64_t variant_id, int tokens, std::string_view phase, db::MeasurementStatus st,
                const Measured& result, const std::string& error, const TelemetryReading& tele);
};

// Verification of one variant at the search's verify token count (inputs
// already set): resumed from the store unless --force. The outcome, or
// nullopt when the device stopped before it could say.
enum class VerifyOutcome { passed, failed, crashed };
Result<std::optional<VerifyOutcome>> verify_one(const SearchConfig& cfg, GpuContext& gpu, const Candidate& c);

// A bucket's stage kinds ranked by the strategy (strategy.hpp), each kind's
// winner recorded with its speedup over the default variant.
struct StageStep {
  const SearchConfig& cfg;
  const Target& target;
  GpuContext& gpu;
  const std::vector<Candidate>& candidates;
  std::mt19937_64 rng;
  bool many_gpus = false;  // other devices search beside this one (progress lines name the device)

  // The kind's candidates, fastest first (empty when none ran); nullopt when the device stopped.
  Result<std::optional<Ranked>> rank(Strategy& strategy, StageRole kind, int tokens, const TelemetryReading& tele);
  // The kind's winner (timed.front()) and its speedup over the default variant (timed the same way).
  Status record_winner(StageRole kind, int tokens, const Ranked& timed, const TelemetryReading& tele);
};

// The whole layer of a bucket: stages are tuned alone, but a layer pads every
// expert's rows to the row block of its pair, so the pair is chosen among the
// best of each stage by timing them together (the layer program's steps, as
// the runtime runs them) on this device; the fastest pair that passes
// verification at this token count is timed at length and recorded as the
// bucket's layer winner. A bucket that ends without one says why.
struct LayerStep {
  const SearchConfig& cfg;
  const Target& target;
  GpuContext& gpu;
  const std::optional<Ceilings>& ceilings;
  bool many_gpus = false;

  // false when the device stopped.
  Result<bool> run(int tokens, const Ranked& s1, const Ranked& s2, const TelemetryReading& tele);

 private:
  void no_layer(int tokens, const std::string& reason);
  std::string gpu_prefix() const { return many_gpus ? gpu.m.label() + ": " : ""; }
  Result<bool> try_pair(int tokens, const Candidate* c1, const Candidate* c2, const TelemetryReading& tele,
                        std::string& why);
};

// The stage pairs worth timing as a layer, in order of their summed stage
// times, at most nine (one per class where there are more classes): the best five of each stage crossed, and -- so that a
// bucket whose fastest stages do not fit together still gets a layer -- the
// best variant of each class (rows per tile, where the routed weight is
// applied, whether stage 2 writes Y) of either stage with the fastest variant
// of the other stage that fits it; those class pairs are always kept, the
// fastest others fill the nine. A stage 2 that writes Y is slower alone than
// its plain form but saves the layer's reduce launch (and its clear): only a
// layer timing can tell, so its best is always paired. Which pairs fit is the layer program's rule
// (pair_fits). Empty only when no ranked pair fits; `skipped` then says why
// the last one tried did not.
struct LayerPairs {
  std::vector<std::pair<const Candidate*, const Candidate*>> pairs;
  std::string skipped;
};
LayerPairs layer_pairs(const Target& target, const Problem& problem, const Ranked& s1, const Ranked& s2);

}  // namespace ft
