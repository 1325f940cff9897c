// The model-guided pick: the model's fastest as the budget allows (at least
// min_top), a few at random, always the default variant; every candidate, and
// why, when there is no model, too little data, a bad cross-validated ranking,
// or when everything fits the budget. Also the search's entry point on a store.
#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/search/model_test_support.hpp"
#include "search/model_pick.hpp"

namespace ft {
namespace {

using model::CostModel;
using model::Pick;
using model::PickOptions;
using model::Point;

struct Fixture {
  model::Dataset d = test::synthetic_dataset();
  std::vector<Point> candidates;
  std::optional<CostModel> m;
  explicit Fixture(int tokens = 4096) {
    std::vector<std::size_t> held, rest;
    test::split_bucket(d, tokens, held, rest);
    for (std::size_t i : held) candidates.push_back(d.samples[i].at);
    auto fitted = CostModel::fit(d, rest);
    EXPECT_TRUE(fitted) << fitted.error().describe();
    if (fitted) m.emplace(std::move(*fitted));
  }
  // The candidate predicted slowest (a default variant that is never among the fastest).
  std::size_t slowest() const {
    std::vector<double> p;
    for (const Point& c : candidates) p.push_back(m->predict_us(d, c));
    return std::size_t(std::max_element(p.begin(), p.end()) - p.begin());
  }
};

PickOptions tight() {
  PickOptions o;
  o.budget_s = 0;  // only min_top of the model's fastest
  return o;
}

TEST(ModelPick, NoModelTimesEverythingAndSaysWhy) {
  Fixture f;
  std::mt19937_64 rng(1);
  const Pick p = model::pick(f.d, nullptr, "no moe1 timings on Test GPU to learn from", f.candidates, 0, tight(), rng);
  EXPECT_TRUE(p.everything);
  EXPECT_EQ(p.chosen.size(), f.candidates.size());
  EXPECT_TRUE(p.predicted_us.empty());
  EXPECT_EQ(p.why, "timed all 48: no moe1 timings on Test GPU to learn from");
}

struct Unusable {
  const char* name;
  model::FitReport report;
  const char* because;
};
class UnusableModel : public ::testing::TestWithParam<Unusable> {};
TEST_P(UnusableModel, IsNamed) {
  PickOptions o;
  EXPECT_NE(model::unusable_because(GetParam().report, o).find(GetParam().because), std::string::npos)
      << model::unusable_because(GetParam().report, o);
}
INSTANTIATE_TEST_SUITE_P(
    Reasons, UnusableModel,
    ::testing::Values(Unusable{"few_samples", {10, 3, 5, 1, 0.9, 3}, "has 10 timings to learn from (it needs 16)"},
                      Unusable{"one_bucket", {40, 1, 5, 1, 0, 0}, "come from 1 bucket(s) (it needs 2)"},
                      Unusable{"bad_ranking", {40, 4, 5, 1, 0.2, 4}, "ranks badly: rank correlation 0.20"},
                      Unusable{"usable", {40, 4, 5, 1, 0.8, 4}, ""}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(ModelPick, AnUntrustedModelTimesEverything) {
  Fixture f;
  PickOptions o = tight();
  o.min_spearman = 1.01;  // no fit is that good
  std::mt19937_64 rng(1);
  const Pick p = model::pick(f.d, &*f.m, "", f.candidates, std::nullopt, o, rng);
  EXPECT_TRUE(p.everything);
  EXPECT_EQ(p.chosen.size(), f.candidates.size());
  EXPECT_NE(p.why.find("ranks badly"), std::string::npos) << p.why;
}

TEST(ModelPick, EverythingThatFitsTheBudgetIsTimed) {
  Fixture f;
  PickOptions o;
  o.budget_s = 1e6;
  std::mt19937_64 rng(1);
  const Pick p = model::pick(f.d, &*f.m, "", f.candidates, std::nullopt, o, rng);
  EXPECT_TRUE(p.everything);
  EXPECT_EQ(p.chosen.size(), f.candidates.size());
  EXPECT_EQ(p.predicted_us.size(), f.candidates.size());
  EXPECT_NE(p.why.find("fit the budget"), std::string::npos) << p.why;
}

TEST(ModelPick, TheFastestPredictionsThenExplorationThenTheDefault) {
  Fixture f;
  const std::size_t def = f.slowest();
  PickOptions o = tight();
  std::mt19937_64 rng(1);
  const Pick p = model::pick(f.d, &*f.m, "", f.candidates, def, o, rng);
  EXPECT_FALSE(p.everything);
  EXPECT_EQ(p.top, o.min_top);
  EXPECT_EQ(p.explored, o.explore);
  EXPECT_TRUE(p.baseline_added);
  ASSERT_EQ(p.chosen.size(), o.min_top + o.explore + 1);
  EXPECT_EQ(p.chosen.back(), def);
  EXPECT_EQ(std::set<std::size_t>(p.chosen.begin(), p.chosen.end()).size(), p.chosen.size()) << "a candidate twice";
  // The first min_top are the predicted fastest, in order.
  std::vector<std::size_t> order(f.candidates.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](auto a, auto b) { return p.predicted_us[a] < p.predicted_us[b]; });
  for (std::size_t k = 0; k < o.min_top; ++k) EXPECT_EQ(p.chosen[k], order[k]);
  EXPECT_NE(p.why.find("timed 13 of 48: the 8 predicted fastest, 4 at random, the default"), std::string::npos) << p.why;
}

TEST(ModelPick, TheDefaultAlreadyPickedIsNotAddedTwice) {
  Fixture f;
  PickOptions o = tight();
  o.explore = 0;
  std::mt19937_64 rng(1);
  const Pick first = model::pick(f.d, &*f.m, "", f.candidates, std::nullopt, o, rng);
  const Pick p = model::pick(f.d, &*f.m, "", f.candidates, first.chosen.front(), o, rng);
  EXPECT_FALSE(p.baseline_added);
  EXPECT_EQ(p.chosen.size(), o.min_top);
}

TEST(ModelPick, ALargerBudgetTimesMoreOfTheFastest) {
  Fixture f;
  std::size_t previous = 0;
  for (double budget : {0.0, 0.5, 2.0, 8.0}) {
    PickOptions o;
    o.budget_s = budget;
    o.explore = 0;
    std::mt19937_64 rng(1);
    const Pick p = model::pick(f.d, &*f.m, "", f.candidates, std::nullopt, o, rng);
    EXPECT_GE(p.top, previous) << budget;
    EXPECT_GE(p.top, o.min_top);
    // Within the budget unless min_top needs more.
    if (p.top > o.min_top && !p.everything) { EXPECT_LE(p.predicted_s, budget + 1e-9) << budget; }
    previous = p.top;
  }
}

TEST(ModelPick, FindsTheWinnerOfEveryHeldOutBucket) {
  for (int tokens : {16, 64, 512, 4096, 16384}) {
    Fixture f(tokens);
    std::size_t win = 0;
    std::vector<std::size_t> held, rest;
    test::split_bucket(f.d, tokens, held, rest);
    for (std::size_t k = 0; k < held.size(); ++k)
      if (f.d.samples[held[k]].time_us < f.d.samples[held[win]].time_us) win = k;
    std::mt19937_64 rng(1);
    const Pick p = model::pick(f.d, &*f.m, "", f.candidates, std::nullopt, tight(), rng);
    EXPECT_NE(std::find(p.chosen.begin(), p.chosen.end(), win), p.chosen.end()) << "T=" << tokens;
  }
}

// The search's entry point: a store with timings at the earlier buckets of a
// problem, the bucket itself excluded from the fit.
TEST(ModelPick, ForABucketOfAStore) {
  test::ScratchDir dir;
  auto store = db::Store::open(dir.file("m.db"));
  ASSERT_TRUE(store) << store.error().describe();
  const model::Dataset d = test::synthetic_dataset();
  const test::StoredDataset ids = test::store_dataset(*store, d, "halving");
  std::mt19937_64 rng(1);
  std::vector<std::int64_t> cands;
  for (const auto& [id, stored] : ids.variants) cands.push_back(stored);
  // Nothing timed yet: every candidate.
  auto pick_at = [&](int tokens, std::optional<std::size_t> baseline) -> Result<model::Pick> {
    const model::Dataset at = FT_TRY(model::load_for_bucket(*store, "moe1", ids.problem, ids.device, tokens));
    return model::pick_for_bucket(at, ids.problem, ids.device, tokens, cands, baseline, tight(), rng);
  };
  auto first = pick_at(4096, std::nullopt);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_TRUE(first->everything);
  EXPECT_NE(first->why.find("no moe1 timings on Test GPU"), std::string::npos) << first->why;
  test::store_samples(*store, d, ids, ids.run, [](const model::Sample& s) { return s.at.tokens != 16384; });
  auto p = pick_at(16384, 0);
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_FALSE(p->everything) << p->why;
  EXPECT_NE(p->why.find("model of 240 timings in 5 buckets"), std::string::npos) << p->why;
  // The bucket itself is left out of the fit: its timings would be 48 more.
  auto again = pick_at(4096, 0);
  ASSERT_TRUE(again);
  EXPECT_NE(again->why.find("model of 192 timings in 4 buckets"), std::string::npos) << again->why;
  auto unknown = model::load_for_bucket(*store, "moe1", ids.problem, ids.device + 7, 4096);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::not_found);
}

}  // namespace
}  // namespace ft
