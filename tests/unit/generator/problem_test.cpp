#include "generator/problem.hpp"

#include <unistd.h>

#include <filesystem>
#include <fstream>

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

// The public shape suite (shared/REFERENCE.md) and the two shapes outside it
// that the H200 runs use are built in, and every preset is a valid problem.
TEST(Problem, SuitePresetsAreBuiltInAndValid) {
  struct Shape {
    const char* name;
    int experts, hidden, inter, topk;
  };
  for (const Shape& s : {Shape{"mixtral-8x7b", 8, 4096, 14336, 2}, Shape{"mixtral-8x7b-tp8", 8, 4096, 1792, 2},
                         Shape{"qwen3-30b", 128, 2048, 768, 8}, Shape{"qwen3-235b", 128, 4096, 1536, 8},
                         Shape{"deepseek-v3", 256, 7168, 2048, 8}, Shape{"olmoe", 64, 2048, 1024, 8},
                         Shape{"gpt-oss-120b-like", 128, 2880, 2880, 4}, Shape{"deepseek-v2-lite", 64, 2048, 1408, 6},
                         Shape{"qwen1.5-moe", 60, 2048, 1408, 4}}) {
    auto p = problem_from_preset(s.name);
    ASSERT_TRUE(p) << s.name << ": " << p.error().describe();
    EXPECT_EQ(p->experts, s.experts) << s.name;
    EXPECT_EQ(p->hidden, s.hidden) << s.name;
    EXPECT_EQ(p->inter, s.inter) << s.name;
    EXPECT_EQ(p->topk, s.topk) << s.name;
  }
  for (const ProblemPreset& preset : problem_presets()) {
    auto p = problem_from_preset(preset.name);
    ASSERT_TRUE(p) << preset.name;
    EXPECT_TRUE(p->validate()) << preset.name;
  }
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
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336,"topk":2,"routing":"hot:1"})", "fewer experts than topk"},
                      // 64-bit values are refused, never wrapped to 32 bits (4294967304 = 2^32 + 8).
                      BadJson{R"({"experts":4294967304,"hidden":4096,"inter":14336,"topk":2})", "\"experts\" is 4294967304, far outside"},
                      BadJson{R"({"experts":8,"hidden":4294971392,"inter":14336,"topk":2})", "\"hidden\" is 4294971392"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":9223372036854775807,"topk":2})", "\"inter\" is 9223372036854775807"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336,"topk":-4294967294})", "\"topk\" is -4294967294"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":2147483584,"topk":2})", "inter must be a positive multiple of 64 up to 1048576"},
                      BadJson{R"({"experts":8,"hidden":4096,"inter":14336,"topk":2,"routing":"zipf:nan"})", "finite exponent"}));

// fp8 problems: the scales are part of the key (16-bit keys unchanged), the
// dtype spec spells both, and what does not fit is refused with one reason.
struct DTypeCase {
  const char* json;
  const char* key;  // null: refused
  const char* expect;
};
class Fp8Problem : public ::testing::TestWithParam<DTypeCase> {};

TEST_P(Fp8Problem, KeyOrOneClearReason) {
  auto p = problem_from_json_text(GetParam().json, "p.json");
  if (!GetParam().key) {
    ASSERT_FALSE(p) << GetParam().json;
    EXPECT_NE(p.error().describe().find(GetParam().expect), std::string::npos) << p.error().describe();
    return;
  }
  ASSERT_TRUE(p) << p.error().describe();
  EXPECT_EQ(p->key(), GetParam().key);
  EXPECT_EQ(p->dtype == DType::e4m3, p->fp8());
}

INSTANTIATE_TEST_SUITE_P(
    Table, Fp8Problem,
    ::testing::Values(
        DTypeCase{R"({"experts":4,"hidden":256,"inter":512,"topk":2,"dtype":"bf16"})", "moe_e4_h256_i512_k2_bf16_swiglu_uniform", ""},
        DTypeCase{R"({"experts":4,"hidden":256,"inter":512,"topk":2,"dtype":"fp8"})", "moe_e4_h256_i512_k2_e4m3:per-tensor_swiglu_uniform", ""},
        DTypeCase{R"({"experts":4,"hidden":256,"inter":512,"topk":2,"dtype":"fp8","scales":"per-token"})",
                  "moe_e4_h256_i512_k2_e4m3:per-token_swiglu_uniform", ""},
        DTypeCase{R"({"experts":4,"hidden":256,"inter":512,"topk":2,"dtype":"e4m3:block128"})",
                  "moe_e4_h256_i512_k2_e4m3:block128_swiglu_uniform", ""},
        DTypeCase{R"({"experts":4,"hidden":256,"inter":512,"topk":2,"dtype":"fp8","scales":"block64"})", nullptr, "unknown scales 'block64'"},
        DTypeCase{R"({"experts":4,"hidden":256,"inter":512,"topk":2,"dtype":"bf16:per-token"})", nullptr, "scales apply to fp8"},
        DTypeCase{R"({"experts":4,"hidden":256,"inter":512,"topk":2,"dtype":"bf16","scales":"per-token"})", nullptr, "apply to fp8 problems only"},
        DTypeCase{R"({"experts":4,"hidden":192,"inter":512,"topk":2,"dtype":"fp8"})", nullptr, "multiples of 128"}));

TEST(Problem, DTypeSpecRoundTrips) {
  for (const char* spec : {"bf16", "f16", "e4m3:per-tensor", "e4m3:per-token", "e4m3:block128"}) {
    auto d = parse_dtype_spec(spec);
    ASSERT_TRUE(d) << spec;
    Problem p;
    p.dtype = d->dtype;
    p.scales = d->scales;
    EXPECT_EQ(p.dtype_spec(), spec);
  }
}

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
  for (const char* bad : {"zipf:nan", "zipf:inf", "zipf:-inf", "zipf:1e400", "zipf:0", "zipf:1e-9", "zipf:101"})
    EXPECT_FALSE(Routing::parse(bad)) << bad;
  EXPECT_DOUBLE_EQ(Routing::parse("zipf:100")->zipf_s, 100.0);
  EXPECT_FALSE(Routing::parse("zipf"));
  EXPECT_FALSE(Routing::parse("normal"));
}

// Two traces named alike are two problems: the key carries the content hash.
TEST(Routing, ReplayIsKeyedByTheFileContents) {
  const auto base = std::filesystem::temp_directory_path() / ("flytune-replay-" + std::to_string(::getpid()));
  std::filesystem::create_directories(base / "a");
  std::filesystem::create_directories(base / "b");
  std::filesystem::create_directories(base / "c");
  std::ofstream(base / "a" / "trace.txt") << "0 1\n2 3\n";
  std::ofstream(base / "b" / "trace.txt") << "4 5\n6 7\n";
  std::ofstream(base / "c" / "trace.txt") << "0 1\n2 3\n";
  auto key = [&](const char* folder) {
    auto r = Routing::parse("replay:" + (base / folder / "trace.txt").string());
    EXPECT_TRUE(r);
    EXPECT_TRUE(r->hash_replay_file()) << folder;
    return r->key();
  };
  EXPECT_NE(key("a"), key("b"));
  EXPECT_EQ(key("a"), key("c"));
  EXPECT_EQ(key("a").rfind("replay:trace.txt#", 0), 0u) << key("a");
  EXPECT_EQ(key("a").size(), std::string("replay:trace.txt#").size() + 16);
  auto missing = Routing::parse("replay:" + (base / "none.txt").string());
  ASSERT_TRUE(missing);
  EXPECT_FALSE(missing->hash_replay_file());
  auto folder = Routing::parse("replay:" + base.string());
  EXPECT_FALSE(folder->hash_replay_file());
  std::filesystem::remove_all(base);
}

TEST(TokenList, ErrorsNameTheLimitAndQuoteTheWholeList) {
  auto over = parse_token_list("1,16777217");
  ASSERT_FALSE(over);
  EXPECT_NE(over.error().message.find("'16777217' is above the limit of 16777216 (2^24) tokens"), std::string::npos)
      << over.error().message;
  EXPECT_EQ(parse_token_list("16777216")->back(), 16777216);
  EXPECT_FALSE(parse_token_list("99999999999999999999"));
  auto empty = parse_token_list("1,,2");
  ASSERT_FALSE(empty);
  EXPECT_NE(empty.error().message.find("token list '1,,2': an empty entry"), std::string::npos) << empty.error().message;
  auto huge = parse_token_list(std::string(300, '9'));
  ASSERT_FALSE(huge);
  EXPECT_LT(huge.error().message.size(), 250u) << huge.error().message;
  EXPECT_NE(huge.error().message.find("(300 characters)"), std::string::npos) << huge.error().message;
}

TEST(Shorten, KeepsShortTextAndCutsLongText) {
  EXPECT_EQ(shorten("abc"), "abc");
  EXPECT_EQ(shorten(std::string(50, 'x'), 10), "xxxxxxxxxx... (50 characters)");
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
