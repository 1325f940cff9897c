#include "generator/problem.hpp"

#include <gtest/gtest.h>

namespace ft {
namespace {

TEST(Problem, MixtralPresetAndKey) {
  auto p = problem_from_preset("mixtral-8x7b");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->experts, 8);
  EXPECT_EQ(p->hidden, 4096);
  EXPECT_EQ(p->inter, 14336);
  EXPECT_EQ(p->topk, 2);
  EXPECT_EQ(p->key(), "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform");
  EXPECT_DOUBLE_EQ(p->flops(1), 6.0 * 2 * 4096 * 14336);
}

TEST(Problem, UnknownPresetListsKnown) {
  auto p = problem_from_preset("llama");
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("mixtral-8x7b"), std::string::npos);
}

struct BadJson {
  const char* text;
  const char* expect;
};
class ProblemJsonRejects : public ::testing::TestWithParam<BadJson> {};

TEST_P(ProblemJsonRejects, OneClearReason) {
  auto p = problem_from_json_text(GetParam().text, "p.json");
  ASSERT_FALSE(p) << GetParam().text;
  EXPECT_NE(p.error().describe().find(GetParam().expect), std::string::npos) << p.error().describe();
}

INSTANTIATE_TEST_SUITE_P(
    Table, ProblemJsonRejects,
    ::testing::Values(BadJson{"{", "not a JSON object"}, BadJson{"[]", "not a JSON object"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336})", "missing \"topk\""},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336,"topk":9})", "topk must be"},
                      BadJson{R"({"experts":8,"hidden":100,"inter":14336,"topk":2})", "hidden must be"},
                      BadJson{R"({"experts":"8","hidden":4096,"inter":14336,"topk":2})", "must be an integer"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336,"topk":2,"dtype":"fp4"})", "unknown dtype"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336,"topk":2,"colour":1})", "unknown key"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336,"topk":2,"routing":"hot:1"})", "fewer experts than topk"}));

TEST(Problem, JsonAccepted) {
  auto p = problem_from_json_text(R"({"name":"x","experts":16,"hidden":1024,"inter":512,"topk":4,"dtype":"f16","routing":"zipf:1.5"})",
                                  "p.json");
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->key(), "moe_e16_h1024_i512_k4_f16_swiglu_zipf:1.5");
}

TEST(Routing, Parse) {
  EXPECT_TRUE(Routing::parse("uniform"));
  EXPECT_EQ(Routing::parse("hot:2")->hot_experts, 2);
  EXPECT_FALSE(Routing::parse("zipf:-1"));
  EXPECT_FALSE(Routing::parse("zipf"));
  EXPECT_FALSE(Routing::parse("normal"));
}

TEST(TokenList, ParsesListsAndRanges) {
  EXPECT_EQ(*parse_token_list("16,1,4,4"), (std::vector<int>{1, 4, 16}));
  EXPECT_EQ(*parse_token_list("1..16"), (std::vector<int>{1, 2, 4, 8, 16}));
  EXPECT_EQ(*parse_token_list("3..20"), (std::vector<int>{3, 6, 12, 20}));
  EXPECT_FALSE(parse_token_list("0"));
  EXPECT_FALSE(parse_token_list("a,b"));
  EXPECT_FALSE(parse_token_list(""));
  EXPECT_FALSE(parse_token_list("8..2"));
}

TEST(Problem, ActiveExperts) {
  auto p = *problem_from_preset("mixtral-8x7b");
  EXPECT_NEAR(p.expected_active_experts(1), 2.0, 1e-9);
  EXPECT_NEAR(p.expected_active_experts(100000), 8.0, 1e-9);
}

}  // namespace
}  // namespace ft
