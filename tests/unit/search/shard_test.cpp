// --shard I/N: parsing, and the split of the token buckets (disjoint, covering,
// by index in the sorted list).
#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "search/shard.hpp"

namespace ft {
namespace {

TEST(Shard, ParsesIOverN) {
  auto s = parse_shard("2/5");
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_EQ(s->index, 2);
  EXPECT_EQ(s->count, 5);
  EXPECT_EQ(s->label(), "2/5");
  EXPECT_EQ(parse_shard("0/1")->count, 1);
}

class BadShard : public ::testing::TestWithParam<std::string> {};

TEST_P(BadShard, IsAUsageError) {
  auto s = parse_shard(GetParam());
  ASSERT_FALSE(s) << GetParam();
  EXPECT_EQ(s.error().code, Errc::usage);
  EXPECT_EQ(s.error().context, "--shard");
  EXPECT_NE(s.error().message.find("0 <= I < N"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Values, BadShard,
                         ::testing::Values("3/2", "2/2", "x/2", "0/0", "-1/2", "1/-2", "1", "/2", "1/", "1/2/3", " 1/2",
                                           "+1/2", "1/99999999999", ""));

TEST(Shard, SplitsTheSortedBucketsByIndexModN) {
  const std::vector<int> buckets{64, 1, 16, 4, 2, 8, 32};  // sorted: 1 2 4 8 16 32 64
  EXPECT_EQ(shard_tokens(buckets, {0, 3}), (std::vector<int>{1, 8, 64}));
  EXPECT_EQ(shard_tokens(buckets, {1, 3}), (std::vector<int>{2, 16}));
  EXPECT_EQ(shard_tokens(buckets, {2, 3}), (std::vector<int>{4, 32}));
  EXPECT_EQ(shard_tokens(buckets, {0, 1}), (std::vector<int>{1, 2, 4, 8, 16, 32, 64}));
  EXPECT_TRUE(shard_tokens({1, 2}, {3, 4}).empty());
  EXPECT_EQ(shard_tokens({4, 4, 1}, {1, 2}), (std::vector<int>{4}));  // repeats count once
}

TEST(Shard, SharesAreDisjointAndCoverEveryBucket) {
  std::vector<int> buckets;
  for (int t = 1; t <= 16384; t *= 2) buckets.push_back(t);
  for (int n = 1; n <= 20; ++n) {
    std::vector<int> all;
    for (int i = 0; i < n; ++i) {
      auto share = shard_tokens(buckets, {i, n});
      all.insert(all.end(), share.begin(), share.end());
    }
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, buckets) << "N = " << n;
  }
}

}  // namespace
}  // namespace ft
