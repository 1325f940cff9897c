// `flytune db merge` and `flytune search --shard` through the real binary: a
// merged database that db winners, report and export --check-coverage read; refusals
// with one line, exit 1 (mixed toolchains) or 2 (usage), OUT untouched.
#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using test::FileSnapshot;
using test::run_flytune;
using test::ScratchDir;

std::string h200_db() { return std::string(FT_TEST_DATA_DIR) + "/h200.db"; }

std::size_t lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

TEST(DbMergeCli, MergedDatabaseServesWinnersAndCoverage) {
  ScratchDir dir;
  const std::string sample = dir.file("sample.db"), h200 = dir.file("h200.db"), out = dir.file("out.db");
  {
    auto store = db::Store::open(sample);
    ASSERT_TRUE(store) << store.error().describe();
    test::fill_sample(*store);
  }
  std::filesystem::copy_file(h200_db(), h200);
  std::filesystem::permissions(h200, std::filesystem::perms::owner_read | std::filesystem::perms::group_read);
  auto r = run_flytune({"db", "merge", out, h200, sample});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("merged 2 database(s) into " + out), std::string::npos) << r.output;

  auto winners = run_flytune({"db", "--db", out, "winners", "--json"});
  ASSERT_EQ(winners.exit_code, 0) << winners.output;
  auto in_winners = run_flytune({"db", "--db", h200_db(), "winners", "--json"});
  auto j = nlohmann::json::parse(winners.output, nullptr, false), in = nlohmann::json::parse(in_winners.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << winners.output;
  ASSERT_FALSE(in.is_discarded()) << in_winners.output;
  EXPECT_EQ(j.size(), in.size() + 2) << winners.output;  // h200's winners and the sample's two

  auto coverage = run_flytune({"export", "--check-coverage", "--tokens", "1..16384", "--db", out});
  ASSERT_EQ(coverage.exit_code, 0) << coverage.output;
  EXPECT_NE(coverage.output.find("T=1      tuned"), std::string::npos) << coverage.output;

  // Against the unmerged h200.db: nothing missing, broken or slower. (The
  // report keys winners by device name, not driver, so the sample's faster
  // moe1 winners at T=1 and 16, on another driver, count as improvements.)
  auto report = run_flytune({"report", "--baseline", h200_db(), "--current", out, "--fail-on",
                             "missing,regression,broken"});
  EXPECT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("0 broken, 0 regressions, 0 missing, 0 new, 2 improvements, 16 unchanged"),
            std::string::npos) << report.output;

  auto again = run_flytune({"db", "merge", out, sample, h200, "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  auto summary = nlohmann::json::parse(again.output, nullptr, false);
  ASSERT_FALSE(summary.is_discarded()) << again.output;
  EXPECT_EQ(summary["winners_changed"], 0);
  for (const auto& [table, added] : summary["rows_added"].items()) EXPECT_EQ(added, 0) << table;
}

TEST(DbMergeCli, MixedToolchainsAreRefusedInOneLine) {
  ScratchDir dir;
  const std::string a = dir.file("a.db"), b = dir.file("b.db"), out = dir.file("out.db");
  for (const auto& path : {a, b}) {
    auto store = db::Store::open(path);
    ASSERT_TRUE(store) << store.error().describe();
    test::fill_sample(*store);
  }
  test::raw_sql(b, "UPDATE toolchains SET version = '12.8'; UPDATE runs SET started_at = '2026-01-01T00:00:00.000Z'");
  ASSERT_EQ(run_flytune({"db", "merge", out, a}).exit_code, 0);
  const auto before = FileSnapshot::of(out);
  auto r = run_flytune({"db", "merge", out, b});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("nvrtc 13.0"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nvrtc 12.8"), std::string::npos) << r.output;
  EXPECT_EQ(FileSnapshot::of(out), before);
}

TEST(DbMergeCli, MissingArgumentsAreUsageErrors) {
  ScratchDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"db", "merge"}, "flytune: error: OUT is required"},
      {{"db", "merge", dir.file("o.db")}, "flytune: error: IN is required"}};
  for (const auto& [args, error] : cases) {
    auto r = run_flytune(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(r.output.rfind(error, 0), 0u) << r.output;  // the error line first, then the usage hint
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("o.db")));
}

TEST(SearchShardCli, BadShardsAreUsageErrors) {
  ScratchDir dir;
  for (const char* bad : {"3/2", "x/2", "0/0", "-1/2"}) {
    auto r = run_flytune({"search", "--dry-run", "--shard", bad, "--db", dir.file("f.db")});
    EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.output;
    EXPECT_EQ(lines(r.output), 1u) << r.output;
    EXPECT_NE(r.output.find("--shard"), std::string::npos) << r.output;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("f.db")));
}

TEST(SearchShardCli, DryRunRecordsItsShareOfTheBuckets) {
  ScratchDir dir;
  const std::string db = dir.file("f.db");
  setenv("FLYTUNE_CACHE_DIR", dir.file("cache").c_str(), 1);
  auto r = run_flytune({"search", "--dry-run", "--space", "small", "--target", "gfx942", "--tokens", "64,1,16",
                        "--shard", "1/2", "--db", db});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto store = db::Store::open(db, db::OpenMode::read_only);
  ASSERT_TRUE(store) << store.error().describe();
  auto runs = store->list_runs().value();
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].options["tokens"], nlohmann::json({16})) << runs[0].options.dump();
  EXPECT_EQ(runs[0].options["shard"], "1/2") << runs[0].options.dump();

  auto empty = run_flytune({"search", "--dry-run", "--tokens", "1", "--shard", "1/2", "--db", dir.file("e.db")});
  EXPECT_EQ(empty.exit_code, 0) << empty.output;
  EXPECT_NE(empty.output.find("shard 1/2 has no token buckets"), std::string::npos) << empty.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("e.db")));
}

}  // namespace
}  // namespace ft
