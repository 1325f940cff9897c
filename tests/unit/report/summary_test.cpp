// summarize(): one database's winners with floors, counts and failed kernels.
#include <filesystem>

#include <gtest/gtest.h>

#include "report/report.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/report/report_test_support.hpp"

namespace ft::db::report {
namespace {

using test::ScratchDir;
using test::TestDb;

Summary summarize_file(const std::string& path, SummaryOptions opt = {}) {
  auto s = Store::open(path, OpenMode::read_only);
  EXPECT_TRUE(s) << s.error().describe();
  auto sum = summarize(*s, opt);
  EXPECT_TRUE(sum) << sum.error().describe();
  return sum ? *sum : Summary{};
}

TEST(ReportSummary, WinnersFloorsAndFailures) {
  ScratchDir dir;
  {
    TestDb db(dir.file("c.db"));
    test::fill_current(db);
  }
  SummaryOptions opt;
  opt.floor = [](const ProblemRecord&, const DeviceRecord&, int tokens, std::string_view kind) -> std::optional<double> {
    if (kind == "layer") return 5.0 * tokens;
    return std::nullopt;
  };
  Summary s = summarize_file(dir.file("c.db"), opt);
  ASSERT_EQ(s.winners.size(), 9u);
  EXPECT_TRUE(s.notices.empty());
  const SummaryRow* layer = nullptr;
  for (const SummaryRow& r : s.winners)
    if (r.key.kind == "layer") layer = &r;
  ASSERT_NE(layer, nullptr);
  EXPECT_DOUBLE_EQ(layer->floor_us.value_or(0), 320);
  EXPECT_DOUBLE_EQ(layer->floor_fraction.value_or(0), 0.8);  // 320 / 400
  EXPECT_EQ(layer->winner.kernel_name, std::string(test::kA) + "+" + test::kC);
  for (const SummaryRow& r : s.winners)
    if (r.key.kind != "layer") {
      EXPECT_FALSE(r.floor_fraction);
    }
  EXPECT_EQ(s.winners.front().key.kind, "layer");  // sorted by problem, device, kind, tokens
  EXPECT_EQ(s.winners[1].key.kind, "moe1");
  EXPECT_EQ(s.winners[1].key.tokens, 1);
  EXPECT_DOUBLE_EQ(s.winners[1].winner.speedup_vs_default.value_or(0), 1.4);

  EXPECT_EQ(s.compile_counts["compile_error"], 1);
  EXPECT_EQ(s.compile_counts["ok"], 10);
  EXPECT_EQ(s.measurement_counts["verify_failed"], 1);
  EXPECT_EQ(s.measurement_counts["timeout"], 1);

  ASSERT_EQ(s.failures.size(), 3u);
  EXPECT_EQ(s.failures[0].kernel_name, test::kE);  // compile errors first
  EXPECT_EQ(s.failures[0].status, "compile_error");
  EXPECT_FALSE(s.failures[0].tokens);
  EXPECT_NE(s.failures[0].message.find("too much shared data"), std::string::npos);
  // Then failed measurements by problem, device, kernel name and tokens.
  EXPECT_EQ(s.failures[1].kernel_name, test::kH);
  EXPECT_EQ(s.failures[1].status, "timeout");
  EXPECT_EQ(s.failures[1].tokens, 16);
  EXPECT_EQ(s.failures[1].message, "watchdog: 120 s");
  EXPECT_EQ(s.failures[2].kernel_name, test::kD);
  EXPECT_EQ(s.failures[2].status, "verify_failed");
  EXPECT_EQ(s.failures[2].tokens, 37);
  EXPECT_EQ(s.failures[2].problem, test::kMixtral);
  EXPECT_EQ(s.failures[2].device, "NVIDIA H200 (sm_90a)");
  EXPECT_EQ(summary_line(s), "9 winners, 1 compile error, 2 failed measurements");
}

TEST(ReportSummary, AnEmptyDatabaseSaysSo) {
  ScratchDir dir;
  { TestDb db(dir.file("e.db")); }
  Summary s = summarize_file(dir.file("e.db"));
  EXPECT_TRUE(s.winners.empty());
  EXPECT_TRUE(s.failures.empty());
  ASSERT_EQ(s.notices.size(), 1u);
  EXPECT_NE(s.notices[0].find("no winners"), std::string::npos);
  EXPECT_NE(to_markdown(s).find("No failed kernels."), std::string::npos);
}

// The recorded H200 database (issue 5), when it is checked in.
TEST(ReportSummary, RecordedH200Database) {
  const std::string path = std::string(FT_TEST_DATA_DIR) + "/h200.db";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "tests/data/h200.db is not checked in yet";
  Summary s = summarize_file(path);
  EXPECT_FALSE(s.winners.empty());
  for (const SummaryRow& r : s.winners) EXPECT_GT(r.winner.timing.median_us, 0) << r.winner.kernel_name;
}

}  // namespace
}  // namespace ft::db::report
