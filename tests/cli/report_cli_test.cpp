// `flytune report`: verdicts and exit codes over databases built with the
// store, every format (JUnit checked by xmllint), --out, --fail-on,
// --threshold, the one-database summary, refusal of missing, garbage and
// foreign files with one line and exit 1 (files untouched), and usage errors.
#include <cctype>
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/report/report_test_support.hpp"

namespace ft {
namespace {

using test::FileSnapshot;
using test::run_flytune;
using test::ScratchDir;

std::size_t lines(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += c == '\n' ? 1 : 0;
  return n;
}

// xmllint ends some answers with a newline, depending on its version.
std::string trimmed(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

class ReportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    baseline_ = dir_.file("baseline.db");
    current_ = dir_.file("current.db");
    test::TestDb b(baseline_);
    test::fill_baseline(b);
    test::TestDb c(current_);
    test::fill_current(c);
  }

  ProcessOutput report(std::vector<std::string> extra) {
    std::vector<std::string> args{"report", "--baseline", baseline_, "--current", current_};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_flytune(args);
  }

  ScratchDir dir_;
  std::string baseline_, current_;
};

TEST_F(ReportCli, MarkdownByDefaultAndExitThreeOnRegressionOrBreakage) {
  auto r = report({});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.output.rfind("### flytune report: FAILED: 3 broken, 2 regressions, 1 missing, 1 new, 1 improvement, "
                           "4 unchanged (12 keys, threshold 5%)",
                           0),
            0u)
      << r.output;
  EXPECT_NE(r.output.find("| **regression** |"), std::string::npos);
}

TEST_F(ReportCli, FailOnChoosesWhatFails) {
  EXPECT_EQ(report({"--fail-on", "none"}).exit_code, 0);
  EXPECT_EQ(report({"--fail-on", "regression"}).exit_code, 3);
  EXPECT_EQ(report({"--fail-on", "broken"}).exit_code, 3);
  EXPECT_EQ(report({"--fail-on", "missing,new"}).exit_code, 3);
  auto self = run_flytune({"report", "--baseline", baseline_, "--current", baseline_, "--fail-on", "missing,new,regression,broken,improvement"});
  EXPECT_EQ(self.exit_code, 0) << self.output;
}

// Missing winners fail CI unless allowed: a current database with none of the
// baseline's winners must not pass.
TEST_F(ReportCli, MissingWinnersFailUnlessAllowed) {
  const std::string empty = dir_.file("empty.db");
  ASSERT_TRUE(db::Store::open(empty));
  auto r = run_flytune({"report", "--baseline", baseline_, "--current", empty});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("FAILED: 0 broken, 0 regressions, 11 missing"), std::string::npos) << r.output;
  auto allowed = run_flytune({"report", "--baseline", baseline_, "--current", empty, "--allow-missing"});
  EXPECT_EQ(allowed.exit_code, 0) << allowed.output;
  EXPECT_NE(allowed.output.find("passed: 0 broken, 0 regressions, 11 missing"), std::string::npos) << allowed.output;
  // Only missing is allowed: a regression still fails with 3.
  EXPECT_EQ(report({"--allow-missing"}).exit_code, 3);
}

TEST_F(ReportCli, ThresholdMovesTheLine) {
  // At 35% the 30% and 10% regressions become unchanged; the broken keys stay.
  auto r = report({"--threshold", "35%", "--format", "json"});
  EXPECT_EQ(r.exit_code, 3);
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_EQ(j["counts"]["regression"], 0);
  EXPECT_EQ(j["counts"]["broken"], 3);
  EXPECT_EQ(j["counts"]["improvement"], 0);  // 25% faster is within 35%
  EXPECT_EQ(report({"--threshold", "0.35", "--fail-on", "regression"}).exit_code, 0);
}

TEST_F(ReportCli, ADatabaseComparedWithItselfReportsNothingAndPasses) {
  for (const std::string& path : {baseline_, current_}) {
    auto r = run_flytune({"report", "--baseline", path, "--current", path});
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("passed: 0 broken, 0 regressions, 0 missing, 0 new, 0 improvements"), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find("Nothing changed beyond noise."), std::string::npos);
  }
}

TEST_F(ReportCli, JsonVerdictsMatchTheKnownOnes) {
  auto r = report({"--format", "json"});
  EXPECT_EQ(r.exit_code, 3);
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  ASSERT_EQ(j["keys"].size(), test::kExpected.size());
  for (const auto& e : test::kExpected) {
    bool found = false;
    for (const auto& k : j["keys"])
      if (k["kind"] == e.kind && k["tokens"] == e.tokens) {
        found = true;
        EXPECT_EQ(k["verdict"], std::string(db::report::to_string(e.verdict))) << e.kind << " T=" << e.tokens;
      }
    EXPECT_TRUE(found) << e.kind << " T=" << e.tokens;
  }
}

TEST_F(ReportCli, JunitIsWellFormedForXmllint) {
  std::string out = dir_.file("report.xml");
  auto r = report({"--format", "junit", "--out", out});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_EQ(r.output.rfind("FAILED: 3 broken, 2 regressions", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("wrote " + out), std::string::npos);
  ASSERT_TRUE(std::filesystem::exists(out));
  auto xmllint = find_executable("xmllint");
  if (!xmllint) GTEST_SKIP() << "xmllint is not installed (Debian: libxml2-utils; scripts/setup.sh installs it)";
  auto check = run_capture({*xmllint, "--noout", out}, {}, std::chrono::seconds(60));
  ASSERT_TRUE(check);
  EXPECT_EQ(check->exit_code, 0) << check->output;
  EXPECT_EQ(check->output, "");
  // And one test case per key, by XPath.
  auto cases = run_capture({*xmllint, "--xpath", "count(//testcase)", out}, {}, std::chrono::seconds(60));
  ASSERT_TRUE(cases);
  EXPECT_EQ(trimmed(cases->output), "12");
  auto failures = run_capture({*xmllint, "--xpath", "count(//testcase/failure)", out}, {}, std::chrono::seconds(60));
  ASSERT_TRUE(failures);
  EXPECT_EQ(trimmed(failures->output), "6");  // 3 broken, 2 regressions, 1 missing (all in the default --fail-on)
}

TEST_F(ReportCli, HtmlToAFile) {
  std::string out = dir_.file("report.html");
  auto r = report({"--format", "html", "--out", out, "--fail-on", "none"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::string html = test::read_bytes(out);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<svg "), std::string::npos);
}

TEST_F(ReportCli, SummaryOfOneDatabase) {
  auto r = run_flytune({"report", "--db", current_});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("### flytune summary: 9 winners, 1 compile error, 2 failed measurements", 0), 0u) << r.output;
  EXPECT_NE(r.output.find("too much shared data"), std::string::npos);
  auto j = run_flytune({"report", "--db", current_, "--format", "json"});
  EXPECT_EQ(j.exit_code, 0);
  auto parsed = nlohmann::json::parse(j.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << j.output;
  EXPECT_EQ(parsed["winners"].size(), 9u);
  EXPECT_EQ(parsed["failures"].size(), 3u);
}

TEST_F(ReportCli, RooflineFloorForTheH200LayerWinners) {
  // The H200's ceilings are known: layer winners get a floor and a percentage.
  auto j = run_flytune({"report", "--db", current_, "--format", "json"});
  auto parsed = nlohmann::json::parse(j.output, nullptr, false);
  ASSERT_FALSE(parsed.is_discarded()) << j.output;
  int with_floor = 0;
  for (const auto& w : parsed["winners"]) {
    if (w["kind"] == "layer") {
      ASSERT_TRUE(w["floor_us"].is_number()) << w.dump();
      // Mixtral 8x7B at T=64 on the H200 (REFERENCE.md): about 665 us.
      EXPECT_NEAR(w["floor_us"].get<double>(), 665, 15);
      EXPECT_NEAR(w["floor_fraction"].get<double>(), w["floor_us"].get<double>() / 400, 1e-9);
      ++with_floor;
    } else {
      EXPECT_TRUE(w["floor_us"].is_null());
    }
  }
  EXPECT_EQ(with_floor, 1);
}

TEST_F(ReportCli, MissingGarbageAndForeignFilesGetOneLineAndStayUntouched) {
  std::string garbage = dir_.file("garbage.db");
  test::write_bytes(garbage, "this is not a database at all\n");
  std::string foreign = dir_.file("foreign.db");
  test::raw_sql(foreign, "CREATE TABLE notes (body TEXT);");
  struct Case {
    std::vector<std::string> args;
    std::string file, expected;
  };
  const std::string absent = dir_.file("absent.db");
  for (const Case& c : {
           Case{{"--baseline", absent, "--current", current_}, absent, "baseline: " + absent + ": no such database"},
           Case{{"--baseline", baseline_, "--current", absent}, absent, "current: " + absent + ": no such database"},
           Case{{"--baseline", garbage, "--current", current_}, garbage, "not a flytune database (not an SQLite file)"},
           Case{{"--baseline", baseline_, "--current", foreign}, foreign, "not a flytune database (an SQLite file of another application"},
           Case{{"--db", garbage}, garbage, "database: " + garbage + ": not a flytune database"},
       }) {
    const bool exists = std::filesystem::exists(c.file);
    FileSnapshot before = exists ? FileSnapshot::of(c.file) : FileSnapshot{};
    std::vector<std::string> args{"report"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    auto r = run_flytune(args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(lines(r.output), 1u) << r.output;
    EXPECT_EQ(r.output.rfind("flytune: error: ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(c.expected), std::string::npos) << r.output;
    if (exists) EXPECT_TRUE(FileSnapshot::of(c.file) == before) << c.file;
    else EXPECT_FALSE(std::filesystem::exists(c.file));
  }
}

TEST_F(ReportCli, InputsAreNeverModified) {
  auto b = FileSnapshot::of(baseline_), c = FileSnapshot::of(current_);
  for (const char* format : {"md", "junit", "json", "html"}) (void)report({"--format", format});
  (void)run_flytune({"report", "--db", current_});
  EXPECT_TRUE(FileSnapshot::of(baseline_) == b);
  EXPECT_TRUE(FileSnapshot::of(current_) == c);
}

TEST_F(ReportCli, UsageErrorsExitTwo) {
  auto b = FileSnapshot::of(baseline_);
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"report"},
           {"report", "--baseline", baseline_},
           {"report", "--current", current_},
           {"report", "--db", current_, "--baseline", baseline_},
           {"report", "--baseline", baseline_, "--current", current_, "--threshold", "5"},
           {"report", "--baseline", baseline_, "--current", current_, "--threshold", "lots"},
           {"report", "--baseline", baseline_, "--current", current_, "--format", "xml"},
           {"report", "--baseline", baseline_, "--current", current_, "--fail-on", "slower"},
           {"report", "--baseline", baseline_, "--current", current_, "--out", baseline_},
       }) {
    auto r = run_flytune(args);
    EXPECT_EQ(r.exit_code, 2) << fmt::format("{}", fmt::join(args, " ")) << "\n" << r.output;
    EXPECT_NE(r.output.find("flytune: error: "), std::string::npos) << r.output;
  }
  EXPECT_TRUE(FileSnapshot::of(baseline_) == b);  // --out naming an input wrote nothing
}

// The recorded H200 database (issue 5) compared with itself, once it is checked in.
TEST(ReportCliRecorded, H200DatabaseAgainstItself) {
  const std::string path = std::string(FT_TEST_DATA_DIR) + "/h200.db";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "tests/data/h200.db is not checked in yet";
  auto before = FileSnapshot::of(path);
  auto r = run_flytune({"report", "--baseline", path, "--current", path, "--format", "json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  EXPECT_FALSE(j["keys"].empty());
  EXPECT_EQ(j["counts"]["unchanged"], j["keys"].size()) << j["summary"];
  auto s = run_flytune({"report", "--db", path});
  EXPECT_EQ(s.exit_code, 0) << s.output;
  EXPECT_TRUE(FileSnapshot::of(path) == before);
}

}  // namespace
}  // namespace ft
