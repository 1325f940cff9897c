#pragma once
// flytune db model-check: how well the cost model would have guided the
// search, replayed on a database's own stage timings. Every bucket (problem,
// device model, token count, kind) whose candidates were all timed -- a
// halving search times every verified variant once, exhaustive ones too; a
// bucket with timings of a model-guided or random run is left out -- is
// predicted by a model fitted without it (leave one bucket out), or, in the
// search replay, by a model fitted on what a `--strategy model` search would
// have measured by then (other problems, and this problem's smaller buckets,
// only the candidates their picks timed). Reported per bucket: where the
// measured winner falls in the model's order, whether the pick times it, the
// fastest time the pick finds over the winner's, and the share of the short
// timing it saves; and per method (features and transfer, features alone,
// transfer alone) how often the winner is among the model's N fastest.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "store/store.hpp"
#include "search/model_pick.hpp"

namespace ft::model {

enum class CheckMode { leave_one_out, search };

struct CheckOptions {
  PickOptions pick;
  CheckMode mode = CheckMode::leave_one_out;
  std::size_t min_candidates = 4;           // smaller buckets are not checked
  std::vector<std::size_t> top_n{1, 3, 5, 10};
  std::uint64_t seed = 1;                   // of the pick's random exploration
  std::string kind;                         // only this kind (empty: every kind with timings)
  std::string problem_key;                  // only this problem (empty: all)
};

struct BucketCheck {
  std::string problem_key, device, kind;
  int tokens = 0;
  std::size_t candidates = 0, timed = 0;
  std::size_t winner_rank = 0;    // the measured winner's place in the model's order (1: predicted fastest; 0: no model)
  bool winner_timed = false;      // the pick times the winner
  double best_ratio = 1;          // the fastest measured time among the pick over the winner's
  double saved = 0;               // share of the short timing's cost (at the measured times) the pick leaves out
  double spearman = 0;            // of the model's order and the measured one (0 without a model)
  double cost_ratio = 0;          // the predicted cost of timing every candidate over the measured one (0 without a model)
  bool model_used = false;        // false: every candidate timed (why)
  std::string why;                // the pick's line
  std::string winner, best_timed; // kernel names
};

struct MethodCheck {
  std::string method;                // "features+transfer" (the search's), "features", "transfer"
  std::size_t buckets = 0;           // buckets a model was fitted for
  std::vector<std::size_t> in_top;   // per top_n: buckets whose winner is among the model's N fastest
  std::vector<double> worst_ratio;   // per top_n: the largest (fastest of the model's N fastest / winner)
  double mean_spearman = 0;
};

struct CheckReport {
  CheckMode mode = CheckMode::leave_one_out;
  std::vector<std::size_t> top_n;
  std::vector<std::string> devices;   // device models checked, "NVIDIA H200 (sm_90a)"
  std::vector<BucketCheck> buckets;   // the search's method
  std::vector<MethodCheck> methods;
};

Result<CheckReport> check_model(db::Store& store, const CheckOptions& opt);

}  // namespace ft::model
