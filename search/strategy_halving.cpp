// --strategy halving (the default): successive halving with a side-by-side finish.
//   1. every candidate, 5 repetitions ("short");
//   2. the best quarter (at least two), 30 repetitions ("long");
//   3. the best three of those in 3 interleaved A/B rounds of 10 repetitions
//      ("ab"), so drift hits all of them alike; the winner is the best median
//      of the rounds.
// The ranking is those three, then the rest of the best quarter by their long
// times, then the rest by their screen: the winner is the first, and the layer
// step finds a partner stage that fits further down when the first ones do not.
#include <algorithm>

#include "search/strategy.hpp"

namespace ft {
namespace {

class Halving final : public Strategy {
 public:
  std::optional<Ranked> rank(const std::vector<const Candidate*>& pool, const StageQuery&, StageTimer& timer) override {
    std::optional<Ranked> screened = time_each(pool, "short", kShortReps, timer);
    if (!screened) return std::nullopt;
    Ranked timed = std::move(*screened);
    if (timed.size() <= 1) return timed;
    const std::size_t quarter = std::max<std::size_t>(2, (timed.size() + 3) / 4);
    Ranked screened_rest(timed.begin() + std::ptrdiff_t(std::min(quarter, timed.size())), timed.end());
    timed.resize(std::min(quarter, timed.size()));
    for (auto& [t, c] : timed)
      if (auto long_time = timer.time(*c, "long", kLongReps)) t = *long_time;
    if (timer.stopped()) return std::nullopt;
    sort_fastest_first(timed);
    const std::size_t top = std::min<std::size_t>(3, timed.size());
    Ranked long_rest(timed.begin() + std::ptrdiff_t(top), timed.end());
    timed.resize(top);
    timer.interleaved(timed, kAbRounds, kAbReps);
    if (timer.stopped()) return std::nullopt;
    sort_fastest_first(timed);
    timed.insert(timed.end(), long_rest.begin(), long_rest.end());
    timed.insert(timed.end(), screened_rest.begin(), screened_rest.end());
    return timed;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_halving_strategy(const StrategyOptions&) { return std::make_unique<Halving>(); }

}  // namespace ft
