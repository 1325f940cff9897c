// --strategy model: successive halving (strategy_halving.cpp) over the cost
// model's pick of the pool (model_pick.hpp): the candidates it predicts
// fastest that fit the bucket's timing budget, a few others at random, and
// the default variant; every candidate where the model has too little data or
// ranks badly in cross-validation. What it picked, and why, goes to the
// search's notes.
#include <fmt/format.h>

#include "search/model_pick.hpp"
#include "search/strategy.hpp"

namespace ft {

std::unique_ptr<Strategy> make_halving_strategy(const StrategyOptions&);

namespace {

class ModelGuided final : public Strategy {
 public:
  explicit ModelGuided(const StrategyOptions& o) : options_(o), halving_(make_halving_strategy(o)) {}

  std::optional<Ranked> rank(const std::vector<const Candidate*>& pool, const StageQuery& q, StageTimer& timer) override {
    std::vector<std::int64_t> ids;
    std::optional<std::size_t> baseline;
    for (std::size_t i = 0; i < pool.size(); ++i) {
      ids.push_back(pool[i]->id);
      if (pool[i] == q.baseline) baseline = i;
    }
    model::PickOptions opt;
    opt.budget_s = options_.model_budget_s;
    opt.explore = std::size_t(std::max(0, options_.model_explore));
    opt.reps = kShortReps;
    // The data is read between the search's writes; the fit runs outside them.
    model::Dataset data;
    const std::string kind(to_string(q.kind));
    auto read = timer.read_store([&](db::Store& store) -> Status {
      data = FT_TRY(model::load_for_bucket(store, kind, q.problem_id, q.device_id, q.tokens));
      return {};
    });
    std::vector<const Candidate*> chosen = pool;
    if (!read) {
      timer.note(fmt::format("T={} {}: every candidate timed (the cost model's data could not be read: {})", q.tokens, kind,
                             read.error().describe()));
    } else {
      const model::Pick pick = model::pick_for_bucket(data, q.problem_id, q.device_id, q.tokens, ids, baseline, opt, *q.rng);
      timer.note(fmt::format("T={} {}: {}", q.tokens, kind, pick.why));
      chosen.clear();
      for (std::size_t i : pick.chosen) chosen.push_back(pool[i]);
    }
    return halving_->rank(chosen, q, timer);
  }

 private:
  StrategyOptions options_;
  std::unique_ptr<Strategy> halving_;
};

}  // namespace

std::unique_ptr<Strategy> make_model_strategy(const StrategyOptions& o) { return std::make_unique<ModelGuided>(o); }

}  // namespace ft
