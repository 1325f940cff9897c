// --strategy exhaustive: every candidate timed at length (30 repetitions, "long").
#include "tuner/search/strategy.hpp"

namespace ft {
namespace {

class Exhaustive final : public Strategy {
 public:
  std::optional<Ranked> rank(const std::vector<const Candidate*>& pool, const StageQuery&, StageTimer& timer) override {
    Ranked timed;
    for (const Candidate* c : pool) {
      if (timer.stopped()) return std::nullopt;
      if (auto t = timer.time(*c, "long", kLongReps)) timed.emplace_back(*t, c);
      timer.screened(*c);
    }
    sort_fastest_first(timed);
    return timed;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_exhaustive_strategy(const StrategyOptions&) { return std::make_unique<Exhaustive>(); }

}  // namespace ft
