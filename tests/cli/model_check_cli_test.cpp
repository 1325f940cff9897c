// `flytune db model-check` on real H200 databases (tests/data/h200.db, a
// halving search of Mixtral; tiny_forms.db, exhaustive searches of four
// spaces): every bucket with all its candidates timed is checked, and the
// numbers it prints hang together (ranks within the candidates, ratios of at
// least 1, savings below 1, top-N counts growing with N); the file is never
// written; bad options are usage errors.
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using test::run_flytune;

// (problem key, tokens, kind) of every bucket with at least 4 stage timings of
// one device model (of one kind, when given).
std::set<std::tuple<std::string, int, std::string>> timed_buckets(const std::string& path, const std::string& kind) {
  auto store = db::Store::open(path, db::OpenMode::read_only);
  EXPECT_TRUE(store) << store.error().describe();
  std::map<std::int64_t, std::string> problems, kinds;
  const auto problem_rows = store->problems().value();
  const auto variant_rows = store->variants().value();
  for (const auto& p : problem_rows) problems[p.id] = p.key;
  for (const auto& v : variant_rows) kinds[v.id] = v.kind;
  std::map<std::tuple<std::string, int, std::string>, std::set<std::int64_t>> variants;
  db::MeasurementFilter f;
  f.status = db::MeasurementStatus::ok;
  const auto measurement_rows = store->measurements(f).value();
  for (const auto& m : measurement_rows)
    if (m.median_us && (m.phase == "short" || m.phase == "long" || m.phase == "ab"))
      variants[{problems[m.problem_id], m.tokens, kinds[m.variant_id]}].insert(m.variant_id);
  std::set<std::tuple<std::string, int, std::string>> out;
  for (const auto& [key, ids] : variants)
    if (ids.size() >= 4 && (kind.empty() || std::get<2>(key) == kind)) out.insert(key);
  return out;
}

nlohmann::json check_json(const std::string& db, std::vector<std::string> extra = {}) {
  std::vector<std::string> args{"db", "--db", db, "--json", "model-check"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_flytune(args);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

void expect_sane(const nlohmann::json& j, const std::string& db, const std::string& kind = {}) {
  const auto expected = timed_buckets(db, kind);
  std::set<std::tuple<std::string, int, std::string>> seen;
  ASSERT_TRUE(j["buckets"].is_array());
  for (const auto& b : j["buckets"]) {
    seen.insert({b["problem"].get<std::string>(), b["tokens"].get<int>(), b["kind"].get<std::string>()});
    const std::size_t n = b["candidates"], timed = b["timed"];
    EXPECT_GE(n, 4u);
    EXPECT_GE(timed, 1u);
    EXPECT_LE(timed, n);
    EXPECT_EQ(b["model_used"].get<bool>(), timed < n) << b.dump();
    if (!b["winner_rank"].is_null()) {
      EXPECT_GE(b["winner_rank"].get<std::size_t>(), 1u);
      EXPECT_LE(b["winner_rank"].get<std::size_t>(), n);
    }
    EXPECT_GE(b["best_ratio"].get<double>(), 1.0);
    EXPECT_EQ(b["best_ratio"].get<double>() == 1.0, b["winner_timed"].get<bool>() || b["best_timed"] == b["winner"]) << b.dump();
    EXPECT_GE(b["saved"].get<double>(), 0.0);
    EXPECT_LT(b["saved"].get<double>(), 1.0);
    EXPECT_EQ(b["saved"].get<double>() == 0.0, timed == n) << b.dump();
    EXPECT_GE(b["spearman"].get<double>(), -1.0);
    EXPECT_LE(b["spearman"].get<double>(), 1.0);
    EXPECT_FALSE(b["pick"].get<std::string>().empty());
    EXPECT_TRUE(b["pick"].get<std::string>().starts_with("timed ")) << b["pick"];
  }
  EXPECT_EQ(seen, expected);
  EXPECT_EQ(j["buckets"].size(), expected.size());
  ASSERT_EQ(j["methods"].size(), 3u);
  EXPECT_EQ(j["methods"][0]["method"], "features+transfer");
  for (const auto& m : j["methods"]) {
    const std::size_t buckets = m["buckets"];
    EXPECT_LE(buckets, expected.size());
    std::size_t previous = 0;
    double worst = 1e9;
    for (const auto& t : m["top"]) {
      const std::size_t in = t["winner_in_top"];
      EXPECT_GE(in, previous) << m.dump();  // more of the model's fastest hold the winner at least as often
      EXPECT_LE(in, buckets);
      EXPECT_GE(t["worst_ratio"].get<double>(), 1.0);
      EXPECT_LE(t["worst_ratio"].get<double>(), worst + 1e-12) << m.dump();
      previous = in;
      worst = t["worst_ratio"];
    }
  }
}

TEST(ModelCheckCli, H200MixtralLeaveOneBucketOut) {
  const std::string db = std::string(FT_TEST_DATA_DIR) + "/h200.db";
  const test::FileSnapshot before = test::FileSnapshot::of(db);
  const nlohmann::json j = check_json(db);
  expect_sane(j, db);
  EXPECT_EQ(j["mode"], "loo");
  EXPECT_EQ(j["devices"], nlohmann::json::array({"NVIDIA H200 (sm_90a)"}));
  // Six buckets each of stage 1 and stage 2, every one with a model (five other buckets to learn from).
  EXPECT_EQ(j["buckets"].size(), 12u);
  EXPECT_EQ(j["methods"][0]["buckets"], 12);
  EXPECT_EQ(test::FileSnapshot::of(db), before);
}

TEST(ModelCheckCli, H200MixtralSearchReplay) {
  const std::string db = std::string(FT_TEST_DATA_DIR) + "/h200.db";
  const nlohmann::json j = check_json(db, {"--mode", "search", "--budget", "0.5", "--kind", "moe2"});
  expect_sane(j, db, "moe2");
  EXPECT_EQ(j["mode"], "search");
  ASSERT_EQ(j["buckets"].size(), 6u);
  // The first bucket has nothing to learn from, the second one bucket: both time everything.
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_FALSE(j["buckets"][i]["model_used"].get<bool>()) << j["buckets"][i].dump();
    EXPECT_EQ(j["buckets"][i]["timed"], j["buckets"][i]["candidates"]);
  }
  EXPECT_NE(j["buckets"][0]["pick"].get<std::string>().find("no moe2 timings on NVIDIA H200 to learn from"), std::string::npos);
  EXPECT_NE(j["buckets"][1]["pick"].get<std::string>().find("1 bucket(s)"), std::string::npos) << j["buckets"][1]["pick"];
  for (const auto& b : j["buckets"]) EXPECT_EQ(b["kind"], "moe2");
}

TEST(ModelCheckCli, TinyFormsOfFourSpaces) {
  const std::string db = std::string(FT_TEST_DATA_DIR) + "/tiny_forms.db";
  expect_sane(check_json(db), db);
}

TEST(ModelCheckCli, TextTable) {
  const std::string db = std::string(FT_TEST_DATA_DIR) + "/h200.db";
  auto r = run_flytune({"db", "--db", db, "model-check", "--kind", "moe1"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("model check of " + db + " on NVIDIA H200 (sm_90a)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("winner's rank"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("6 bucket(s), the model's pick used in"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("features+transfer"), std::string::npos) << r.output;
}

TEST(ModelCheckCli, NothingToCheck) {
  test::ScratchDir dir;
  const std::string db = dir.file("empty.db");
  ASSERT_TRUE(db::Store::open(db));
  auto r = run_flytune({"db", "--db", db, "model-check"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no bucket of " + db + " has 4 or more stage timings"), std::string::npos) << r.output;
}

TEST(ModelCheckCli, BadOptionsAreUsageErrors) {
  const std::string db = std::string(FT_TEST_DATA_DIR) + "/h200.db";
  for (const std::vector<std::string>& bad : {std::vector<std::string>{"--mode", "bogus"}, {"--budget", "-1"},
                                              {"--min-top", "0"}, {"--explore", "x"}}) {
    std::vector<std::string> args{"db", "--db", db, "model-check"};
    args.insert(args.end(), bad.begin(), bad.end());
    auto r = run_flytune(args);
    EXPECT_EQ(r.exit_code, 2) << bad[0] << ": " << r.output;
  }
}

}  // namespace
}  // namespace ft
