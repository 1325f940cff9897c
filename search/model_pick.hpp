#pragma once
// Model-guided selection (search --strategy model): of a stage's verified
// candidates at a bucket, the ones worth timing -- the cost model's fastest
// predictions, as many as the timing budget of the bucket allows (at least a
// few), a few others at random, and always the default variant -- or, when
// the model has too little data or ranks badly in cross-validation, or when
// timing everything costs no more than the budget, every candidate, saying why.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "store/store.hpp"
#include "search/cost_model.hpp"

namespace ft::model {

struct PickOptions {
  double budget_s = 4;         // seconds of the first (short) timing of a kind at a bucket
  std::size_t min_top = 8;     // at least this many of the model's fastest
  std::size_t explore = 4;     // this many others, drawn at random
  // What one short timing costs: overhead_s + (warmup + reps) x the predicted
  // time. overhead_s covers the worker's round trip and the L2 flushes: about
  // 3 ms a candidate on the H200 (deepseek-v3 at T=1: 314 candidates timed in
  // 1 s, docs/runs/2026-12-01-layer-program/deepseek-v3-search.txt).
  int warmup = 3, reps = 5;
  double overhead_s = 0.0025;
  // When the model is used at all: enough timings, from enough buckets, and a
  // cross-validated rank correlation at least this high.
  std::size_t min_samples = 16, min_buckets = 2;
  double min_spearman = 0.5;
};

struct Pick {
  std::vector<std::size_t> chosen;    // indices into the candidates: the model's fastest first, then the explored, then the default
  std::vector<double> predicted_us;   // per candidate; empty when no model was used
  std::size_t top = 0, explored = 0;  // how many of `chosen` are the model's fastest (all when all fit the budget), how many random
  bool baseline_added = false;        // the default variant was added beside them
  bool everything = false;            // every candidate is timed
  double predicted_s = 0;             // predicted cost of timing `chosen` once (0 without a model)
  std::string why;                    // one line: what was picked, or why everything
};

// Why a fitted model is not used (empty: it is).
std::string unusable_because(const FitReport& r, const PickOptions& opt);

// The pick among `candidates` (points of one bucket of d); `model` null: no
// model could be fitted (`no_model_why` says why).
Pick pick(const Dataset& d, const CostModel* model, const std::string& no_model_why, std::span<const Point> candidates,
          std::optional<std::size_t> baseline, const PickOptions& opt, std::mt19937_64& rng);

// For the search, in two steps so that only the first holds the store: the
// store's timings of `kind` on the model of device row `device_id` (any
// problem and run) without the bucket (problem, tokens) itself...
Result<Dataset> load_for_bucket(db::Store& store, std::string_view kind, std::int64_t problem_id, std::int64_t device_id,
                                int tokens);
// ... and the pick among the variants `variant_ids` at that bucket from a
// model fitted on them. `baseline`: the index of the default variant among them.
Pick pick_for_bucket(const Dataset& d, std::int64_t problem_id, std::int64_t device_id, int tokens,
                     std::span<const std::int64_t> variant_ids, std::optional<std::size_t> baseline, const PickOptions& opt,
                     std::mt19937_64& rng);

}  // namespace ft::model
