// --strategy exhaustive: every candidate timed at length (30 repetitions, "long").
#include "search/strategy.hpp"

namespace ft {
namespace {

class Exhaustive final : public Strategy {
 public:
  std::optional<Ranked> rank(const std::vector<const Candidate*>& pool, const StageQuery&, StageTimer& timer) override {
    return time_each(pool, "long", kLongReps, timer);
  }
};

}  // namespace

std::unique_ptr<Strategy> make_exhaustive_strategy(const StrategyOptions&) { return std::make_unique<Exhaustive>(); }

}  // namespace ft
