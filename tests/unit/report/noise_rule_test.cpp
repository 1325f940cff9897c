// The noise rule and the option parsers of the report.
#include <ostream>

#include <gtest/gtest.h>

#include "report/report.hpp"

namespace ft::db::report {
namespace {

struct NoiseCase {
  const char* what;
  Timing baseline, current;
  double threshold;
  Verdict expected;
};

void PrintTo(const NoiseCase& c, std::ostream* os) { *os << c.what; }

class ReportNoiseRule : public ::testing::TestWithParam<NoiseCase> {};

TEST_P(ReportNoiseRule, Verdict) {
  const NoiseCase& c = GetParam();
  TimingVerdict v = judge_timing(c.baseline, c.current, c.threshold);
  EXPECT_EQ(v.verdict, c.expected) << c.what << ": " << v.reason;
  EXPECT_DOUBLE_EQ(v.ratio, c.current.median_us / c.baseline.median_us);
  EXPECT_FALSE(v.reason.empty());
}

INSTANTIATE_TEST_SUITE_P(
    Cases, ReportNoiseRule,
    ::testing::Values(
        NoiseCase{"identical", {100, 98, 102}, {100, 98, 102}, 0.05, Verdict::unchanged},
        NoiseCase{"slower, disjoint", {100, 98, 102}, {120, 118, 122}, 0.05, Verdict::regression},
        NoiseCase{"faster, disjoint", {100, 98, 102}, {80, 78, 82}, 0.05, Verdict::improvement},
        NoiseCase{"slower beyond threshold, overlapping", {100, 90, 115}, {112, 108, 120}, 0.05, Verdict::unchanged},
        NoiseCase{"faster beyond threshold, overlapping", {100, 85, 110}, {90, 88, 95}, 0.05, Verdict::unchanged},
        NoiseCase{"disjoint within threshold", {100, 99.5, 100.5}, {104, 103.5, 104.5}, 0.05, Verdict::unchanged},
        NoiseCase{"disjoint, threshold 0", {100, 99.5, 100.5}, {104, 103.5, 104.5}, 0.0, Verdict::regression},
        NoiseCase{"exactly at the threshold", {100, 100, 100}, {105, 105, 105}, 0.05, Verdict::unchanged},
        NoiseCase{"touching intervals", {100, 95, 110}, {120, 110, 125}, 0.05, Verdict::unchanged},
        NoiseCase{"no spread: threshold alone", {100, {}, {}}, {110, {}, {}}, 0.05, Verdict::regression},
        NoiseCase{"no spread, faster", {100, {}, {}}, {90, {}, {}}, 0.05, Verdict::improvement},
        NoiseCase{"spread on one side only", {100, {}, {}}, {110, 95, 120}, 0.05, Verdict::unchanged},
        // A median outside its recorded spread widens the interval.
        NoiseCase{"median outside spread", {100, 90, 95}, {106, 98, 110}, 0.05, Verdict::unchanged}));

TEST(ReportTiming, IntervalContainsTheMedian) {
  Timing t{100, 90, 95};
  EXPECT_EQ(t.low(), 90);
  EXPECT_EQ(t.high(), 100);
  Timing bare{100, {}, {}};
  EXPECT_EQ(bare.low(), 100);
  EXPECT_EQ(bare.high(), 100);
  EXPECT_FALSE(bare.has_spread());
}

TEST(ReportParseThreshold, PercentAndFraction) {
  EXPECT_DOUBLE_EQ(parse_threshold("5%").value(), 0.05);
  EXPECT_DOUBLE_EQ(parse_threshold("2.5%").value(), 0.025);
  EXPECT_DOUBLE_EQ(parse_threshold("0.1").value(), 0.1);
  EXPECT_DOUBLE_EQ(parse_threshold("0").value(), 0.0);
  EXPECT_DOUBLE_EQ(parse_threshold("0%").value(), 0.0);
}

TEST(ReportParseThreshold, RefusesWhatIsAmbiguousOrWrong) {
  for (const char* bad : {"5", "abc", "", "%", "-1%", "100%", "5%%", "1e400", "nan"}) {
    auto t = parse_threshold(bad);
    ASSERT_FALSE(t) << bad;
    EXPECT_EQ(t.error().code, Errc::usage) << bad;
  }
  EXPECT_NE(parse_threshold("5").error().message.find("5%"), std::string::npos);
}

TEST(ReportParseVerdicts, ListsAndNone) {
  EXPECT_EQ(parse_verdict_list("regression,broken").value(), (std::vector<Verdict>{Verdict::regression, Verdict::broken}));
  EXPECT_TRUE(parse_verdict_list("none").value().empty());
  EXPECT_EQ(parse_verdict_list("new,missing,new").value(), (std::vector<Verdict>{Verdict::new_key, Verdict::missing}));
  for (Verdict v : kAllVerdicts) EXPECT_EQ(parse_verdict(to_string(v)).value(), v);
  EXPECT_FALSE(parse_verdict_list("regression,,broken"));
  EXPECT_FALSE(parse_verdict_list("slower"));
  EXPECT_FALSE(parse_verdict_list(""));
}

TEST(ReportParseFormat, KnownNames) {
  EXPECT_EQ(parse_format("md").value(), Format::markdown);
  EXPECT_EQ(parse_format("markdown").value(), Format::markdown);
  EXPECT_EQ(parse_format("junit").value(), Format::junit);
  EXPECT_EQ(parse_format("json").value(), Format::json);
  EXPECT_EQ(parse_format("html").value(), Format::html);
  EXPECT_FALSE(parse_format("xml"));
}

}  // namespace
}  // namespace ft::db::report
