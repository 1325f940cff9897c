// --strategy random: a sample of the candidates in the bucket's seeded order,
// --budget of them (0: all) or as many as --time-limit allows, each timed at
// length (30 repetitions, "long").
#include <algorithm>
#include <chrono>

#include "search/strategy.hpp"

namespace ft {
namespace {

class RandomSample final : public Strategy {
 public:
  explicit RandomSample(const StrategyOptions& options) : options_(options) {}

  std::optional<Ranked> rank(const std::vector<const Candidate*>& pool, const StageQuery& query,
                             StageTimer& timer) override {
    std::vector<const Candidate*> order = pool;
    std::shuffle(order.begin(), order.end(), *query.rng);
    const std::size_t budget = options_.budget > 0 ? std::size_t(options_.budget) : order.size();
    const auto start = std::chrono::steady_clock::now();
    Ranked timed;
    for (std::size_t i = 0; i < order.size() && i < budget; ++i) {
      if (timer.stopped()) return std::nullopt;
      if (options_.time_limit_s > 0 &&
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > options_.time_limit_s)
        break;
      if (auto t = timer.time(*order[i], "long", kLongReps)) timed.emplace_back(*t, order[i]);
      timer.screened(*order[i]);
    }
    sort_fastest_first(timed);
    return timed;
  }

 private:
  StrategyOptions options_;
};

}  // namespace

std::unique_ptr<Strategy> make_random_strategy(const StrategyOptions& options) {
  return std::make_unique<RandomSample>(options);
}

}  // namespace ft
