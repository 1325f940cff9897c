// model-check on a store: the buckets of a halving run are checked, one timed
// by a model-guided run (a share of its candidates by design) is not; a law
// the model can learn is ranked right in both modes, and the search replay's
// first buckets time everything.
#include <string>

#include <gtest/gtest.h>

#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/search/model_test_support.hpp"
#include "search/model_check.hpp"

namespace ft {
namespace {

struct CheckStore {
  test::ScratchDir dir;
  db::Store store = db::Store::open(dir.file("c.db")).value();
  model::Dataset d = test::synthetic_dataset();
  test::StoredDataset ids = test::store_dataset(store, d, "halving");
  CheckStore() {
    test::store_samples(store, d, ids, ids.run, [](const model::Sample& s) { return s.at.tokens != 16384; });
    // A model-guided run at the largest bucket times 13 of the 48 candidates.
    const std::int64_t guided = store.begin_run(db::RunRecord::for_this_build("search", "model")).value();
    test::store_samples(store, d, ids, guided,
                        [](const model::Sample& s) { return s.at.tokens == 16384 && s.at.variant_id <= 13; });
  }
};

model::CheckOptions tight(model::CheckMode mode) {
  model::CheckOptions o;
  o.mode = mode;
  o.pick.budget_s = 0;  // the 8 predicted fastest and 4 random ones
  return o;
}

TEST(ModelCheck, LeavesOneBucketOutAndSkipsAModelGuidedRunsBucket) {
  CheckStore s;
  auto rep = model::check_model(s.store, tight(model::CheckMode::leave_one_out));
  ASSERT_TRUE(rep) << rep.error().describe();
  ASSERT_EQ(rep->buckets.size(), 5u);  // T = 1 .. 4096; not 16384
  EXPECT_EQ(rep->devices, std::vector<std::string>{"Test GPU (synthetic)"});
  for (const model::BucketCheck& b : rep->buckets) {
    SCOPED_TRACE(b.tokens);
    EXPECT_NE(b.tokens, 16384);
    EXPECT_EQ(b.kind, "moe1");
    EXPECT_EQ(b.candidates, 48u);
    EXPECT_TRUE(b.model_used) << b.why;
    EXPECT_EQ(b.timed, 12u);
    EXPECT_TRUE(b.winner_timed);
    EXPECT_DOUBLE_EQ(b.best_ratio, 1.0);
    EXPECT_LE(b.winner_rank, 3u);
    EXPECT_GT(b.spearman, 0.9);
    EXPECT_GT(b.saved, 0.5);
    EXPECT_GT(b.cost_ratio, 0.5);
    EXPECT_LT(b.cost_ratio, 2.0);
  }
  ASSERT_EQ(rep->methods.size(), 3u);
  EXPECT_EQ(rep->methods[0].buckets, 5u);
  EXPECT_EQ(rep->methods[0].in_top[2], 5u);  // the winner among the 5 predicted fastest everywhere
}

TEST(ModelCheck, TheSearchReplayStartsWithNothingToLearnFrom) {
  CheckStore s;
  auto rep = model::check_model(s.store, tight(model::CheckMode::search));
  ASSERT_TRUE(rep) << rep.error().describe();
  ASSERT_EQ(rep->buckets.size(), 5u);
  EXPECT_FALSE(rep->buckets[0].model_used);
  EXPECT_EQ(rep->buckets[0].winner_rank, 0u);
  EXPECT_EQ(rep->buckets[0].why, "timed all 48: no moe1 timings on Test GPU to learn from");
  EXPECT_FALSE(rep->buckets[1].model_used);
  EXPECT_NE(rep->buckets[1].why.find("1 bucket(s)"), std::string::npos) << rep->buckets[1].why;
  for (std::size_t i = 2; i < rep->buckets.size(); ++i) {
    EXPECT_TRUE(rep->buckets[i].model_used) << rep->buckets[i].why;
    EXPECT_TRUE(rep->buckets[i].winner_timed) << rep->buckets[i].tokens;
  }
  EXPECT_EQ(rep->methods[0].buckets, 4u);  // the first bucket had no model at all
}

TEST(ModelCheck, FiltersByKindAndProblem) {
  CheckStore s;
  model::CheckOptions o = tight(model::CheckMode::leave_one_out);
  o.kind = "moe2";
  EXPECT_TRUE(model::check_model(s.store, o)->buckets.empty());
  o.kind = "moe1";
  o.problem_key = "another";
  EXPECT_TRUE(model::check_model(s.store, o)->buckets.empty());
}

}  // namespace
}  // namespace ft
