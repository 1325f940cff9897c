// The renderers over the standard pair: Markdown, JUnit (well-formed, every
// key a test case), JSON and HTML (self-contained, one chart per problem,
// device and kind); and the text helpers they use.
#include <cctype>
#include <cstring>

#include <gtest/gtest.h>

#include "report/report.hpp"
#include "report/text.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/report/report_test_support.hpp"

namespace ft::db::report {
namespace {

using test::ScratchDir;
using test::TestDb;

const std::vector<Verdict> kDefaultFailOn{Verdict::regression, Verdict::broken};

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// A small XML well-formedness check: balanced, properly nested elements,
// quoted attributes, no raw '<' or '&' outside markup and entities.
::testing::AssertionResult well_formed_xml(const std::string& xml) {
  std::vector<std::string> open;
  std::size_t i = 0;
  if (xml.rfind("<?xml ", 0) == 0) i = xml.find("?>") + 2;
  auto name_end = [&](std::size_t k) {
    while (k < xml.size() && (std::isalnum(static_cast<unsigned char>(xml[k])) || xml[k] == '-' || xml[k] == '_' ||
                              xml[k] == ':' || xml[k] == '.'))
      ++k;
    return k;
  };
  auto entity_ok = [&](std::size_t k) {
    for (const char* e : {"&amp;", "&lt;", "&gt;", "&quot;", "&#39;"})
      if (xml.compare(k, std::strlen(e), e) == 0) return true;
    return false;
  };
  bool seen_root = false;
  while (i < xml.size()) {
    if (xml[i] == '&' && !entity_ok(i)) return ::testing::AssertionFailure() << "raw & at " << i;
    if (xml[i] == '>') return ::testing::AssertionFailure() << "stray > at " << i;
    if (xml[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(xml[i])))
        return ::testing::AssertionFailure() << "text outside the root at " << i;
      ++i;
      continue;
    }
    const bool closing = xml[i + 1] == '/';
    std::size_t n0 = i + (closing ? 2 : 1), n1 = name_end(n0);
    if (n1 == n0) return ::testing::AssertionFailure() << "bad tag at " << i;
    std::string name = xml.substr(n0, n1 - n0);
    std::size_t k = n1;
    if (closing) {
      if (open.empty() || open.back() != name) return ::testing::AssertionFailure() << "mismatched </" << name << ">";
      open.pop_back();
      if (xml[k] != '>') return ::testing::AssertionFailure() << "bad closing tag " << name;
      i = k + 1;
      continue;
    }
    if (open.empty() && seen_root) return ::testing::AssertionFailure() << "second root element " << name;
    // Attributes: name="value" with no raw < or & in value.
    while (true) {
      while (k < xml.size() && std::isspace(static_cast<unsigned char>(xml[k]))) ++k;
      if (xml[k] == '>' || xml.compare(k, 2, "/>") == 0) break;
      std::size_t a1 = name_end(k);
      if (a1 == k || xml.compare(a1, 2, "=\"") != 0) return ::testing::AssertionFailure() << "bad attribute in " << name;
      std::size_t v0 = a1 + 2, v1 = xml.find('"', v0);
      if (v1 == std::string::npos) return ::testing::AssertionFailure() << "unterminated attribute in " << name;
      for (std::size_t c = v0; c < v1; ++c) {
        if (xml[c] == '<') return ::testing::AssertionFailure() << "raw < in an attribute of " << name;
        if (xml[c] == '&' && !entity_ok(c)) return ::testing::AssertionFailure() << "raw & in an attribute of " << name;
      }
      k = v1 + 1;
    }
    seen_root = true;
    if (xml[k] == '>') open.push_back(name), i = k + 1;
    else i = k + 2;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "unclosed <" << open.back() << ">";
  if (!seen_root) return ::testing::AssertionFailure() << "no root element";
  return ::testing::AssertionSuccess();
}

class ReportRender : public ::testing::Test {
 protected:
  void SetUp() override {
    {
      TestDb b(dir_.file("baseline.db"));
      test::fill_baseline(b);
      TestDb c(dir_.file("current.db"));
      test::fill_current(c);
    }
    auto b = Store::open(dir_.file("baseline.db"), OpenMode::read_only);
    auto c = Store::open(dir_.file("current.db"), OpenMode::read_only);
    ASSERT_TRUE(b && c);
    CompareOptions opt;
    opt.floor = [](const ProblemRecord&, const DeviceRecord&, int tokens, std::string_view kind) -> std::optional<double> {
      return kind == "layer" ? std::optional<double>(tokens * 5.0) : std::nullopt;
    };
    auto cmp = compare(*b, *c, opt);
    ASSERT_TRUE(cmp) << cmp.error().describe();
    comparison_ = *cmp;
  }
  ScratchDir dir_;
  Comparison comparison_;
};

TEST_F(ReportRender, SummaryLineCountsEveryVerdict) {
  EXPECT_EQ(summary_line(comparison_),
            "3 broken, 2 regressions, 1 missing, 1 new, 1 improvement, 4 unchanged (12 keys, threshold 5%)");
}

TEST_F(ReportRender, MarkdownSummaryThenTableThenFoldedUnchanged) {
  std::string md = to_markdown(comparison_, kDefaultFailOn);
  EXPECT_EQ(md.rfind("### flytune report: FAILED: 3 broken, 2 regressions", 0), 0u) << md;
  EXPECT_NE(md.find("| verdict | problem | device | kind | tokens |"), std::string::npos);
  EXPECT_NE(md.find("| **regression** | " + std::string(test::kMixtral) + " | NVIDIA H200 (sm_90a) | moe1 | 16 | "
                    "100.0 (98.00-103.0) | 130.0 (127.0-134.0) | 1.300 |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("<details><summary>4 unchanged keys</summary>"), std::string::npos);
  EXPECT_EQ(count(md, "| **broken** |"), 3u);
  // The verify message is escaped for the table: no raw < > & or |.
  EXPECT_NE(md.find("&lt;max abs 4.5 at [3, 17]&gt; &amp; &quot;bad&quot;"), std::string::npos) << md;
  // Changed keys come before the folded unchanged ones, most severe first.
  EXPECT_LT(md.find("**broken**"), md.find("**regression**"));
  EXPECT_LT(md.find("| improvement |"), md.find("<details>"));

  std::string lenient = to_markdown(comparison_, {});
  EXPECT_EQ(lenient.rfind("### flytune report: passed:", 0), 0u);
  EXPECT_NE(lenient.find("fails on: nothing"), std::string::npos);
}

TEST_F(ReportRender, MarkdownWithoutChanges) {
  Comparison same = comparison_;
  for (KeyResult& k : same.keys) k.verdict = Verdict::unchanged;
  std::string md = to_markdown(same, kDefaultFailOn);
  EXPECT_NE(md.find("Nothing changed beyond noise."), std::string::npos);
  EXPECT_NE(md.find("passed: 0 broken, 0 regressions"), std::string::npos) << md;
}

TEST_F(ReportRender, JunitIsWellFormedWithOneCasePerKey) {
  std::string xml = to_junit(comparison_, kDefaultFailOn);
  EXPECT_TRUE(well_formed_xml(xml)) << xml;
  EXPECT_EQ(count(xml, "<testcase "), comparison_.keys.size());
  EXPECT_EQ(count(xml, "<failure "), 5u);
  EXPECT_EQ(count(xml, "<failure type=\"broken\""), 3u);
  EXPECT_EQ(count(xml, "<failure type=\"regression\""), 2u);
  EXPECT_EQ(count(xml, "<skipped "), 1u);  // the missing key
  EXPECT_NE(xml.find("<testsuites name=\"flytune report: 3 broken"), std::string::npos);
  EXPECT_NE(xml.find("tests=\"12\" failures=\"5\" errors=\"0\" skipped=\"1\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"moe1 T=16\" time=\"0.000130\""), std::string::npos) << xml;

  // With --fail-on missing, the missing key fails instead of being skipped.
  std::string strict = to_junit(comparison_, std::vector<Verdict>{Verdict::missing});
  EXPECT_TRUE(well_formed_xml(strict));
  EXPECT_EQ(count(strict, "<failure "), 1u);
  EXPECT_EQ(count(strict, "<skipped "), 0u);
}

TEST_F(ReportRender, JunitEscapesHostileText) {
  Comparison c = comparison_;
  c.keys[0].reason = "a <b> & \"c\" 'd' \x01\x02 bell\x07 \xff\xfe bad utf-8 ]]> end";
  c.keys[0].verdict = Verdict::regression;
  c.keys[0].key.problem = "p<&>\"";
  std::string xml = to_junit(c, kDefaultFailOn);
  EXPECT_TRUE(well_formed_xml(xml)) << xml;
  EXPECT_EQ(xml.find('\x01'), std::string::npos);
  EXPECT_EQ(xml.find('\xff'), std::string::npos);
  EXPECT_NE(xml.find("a &lt;b&gt; &amp; &quot;c&quot; &#39;d&#39;"), std::string::npos);
}

TEST_F(ReportRender, JsonCarriesEveryKey) {
  nlohmann::json j = to_json(comparison_, kDefaultFailOn);
  EXPECT_EQ(j["report"], "compare");
  EXPECT_EQ(j["failed"], true);
  EXPECT_EQ(j["counts"]["broken"], 3);
  EXPECT_EQ(j["counts"]["unchanged"], 4);
  EXPECT_DOUBLE_EQ(j["threshold"].get<double>(), 0.05);
  ASSERT_EQ(j["keys"].size(), 12u);
  bool saw_regression = false;
  for (const auto& k : j["keys"]) {
    if (k["kind"] == "moe1" && k["tokens"] == 16) {
      saw_regression = true;
      EXPECT_EQ(k["verdict"], "regression");
      EXPECT_EQ(k["fails"], true);
      EXPECT_DOUBLE_EQ(k["ratio"].get<double>(), 1.3);
      EXPECT_DOUBLE_EQ(k["current"]["p90_us"].get<double>(), 134);
      EXPECT_EQ(k["baseline"]["kernel"], test::kA);
    }
    if (k["kind"] == "moe1" && k["tokens"] == 16384) {
      EXPECT_TRUE(k["baseline"].is_null());
    }
    if (k["kind"] == "layer" && k["tokens"] == 64) {
      EXPECT_DOUBLE_EQ(k["floor_us"].get<double>(), 320);
    }
  }
  EXPECT_TRUE(saw_regression);
  // Invalid UTF-8 does not stop the dump.
  Comparison c = comparison_;
  c.keys[0].reason = "bad \xff byte";
  std::string text = render(c, Format::json, kDefaultFailOn);
  EXPECT_FALSE(nlohmann::json::parse(text, nullptr, false).is_discarded());
}

TEST_F(ReportRender, HtmlIsSelfContainedWithAChartPerProblemDeviceAndKind) {
  std::string html = to_html(comparison_, kDefaultFailOn);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count(html, "<svg "), 3u);  // layer, moe1, moe2
  EXPECT_EQ(count(html, "</svg>"), 3u);
  EXPECT_NE(html.find("class=\"s-floor dashed\""), std::string::npos);  // the layer chart has a floor
  EXPECT_NE(html.find("circle class=\"s-current v-regression\""), std::string::npos);
  EXPECT_EQ(count(html, "<tr class=\"v-"), 12u);
  for (const char* external : {"<script", "http://", "https://", "src=", "<link", "url(", "@import"})
    EXPECT_EQ(html.find(external), std::string::npos) << external;
  EXPECT_NE(html.find("&lt;max abs 4.5"), std::string::npos);
  EXPECT_TRUE(html.ends_with("</html>\n"));
}

TEST(ReportRenderSummary, AllFormats) {
  ScratchDir dir;
  {
    TestDb db(dir.file("c.db"));
    test::fill_current(db);
  }
  auto store = Store::open(dir.file("c.db"), OpenMode::read_only);
  ASSERT_TRUE(store);
  auto s = summarize(*store, {});
  ASSERT_TRUE(s);
  std::string md = to_markdown(*s);
  EXPECT_EQ(md.rfind("### flytune summary: 9 winners, 1 compile error, 2 failed measurements", 0), 0u) << md;
  EXPECT_NE(md.find("| moe1 | 1 | 100.5 (98.50-103.5) | - | - | 1.40x |"), std::string::npos) << md;
  EXPECT_NE(md.find("| `" + std::string(test::kH) + "` | timeout |"), std::string::npos) << md;
  std::string xml = to_junit(*s);
  EXPECT_TRUE(well_formed_xml(xml)) << xml;
  EXPECT_EQ(count(xml, "<testcase "), 12u);  // 9 winners + 3 failed kernels
  EXPECT_EQ(count(xml, "<failure "), 3u);
  nlohmann::json j = to_json(*s);
  EXPECT_EQ(j["winners"].size(), 9u);
  EXPECT_EQ(j["failures"].size(), 3u);
  EXPECT_EQ(j["compile_counts"]["compile_error"], 1);
  std::string html = to_html(*s);
  EXPECT_EQ(count(html, "<svg "), 3u);
  EXPECT_EQ(html.find("<script"), std::string::npos);
}

TEST(ReportText, Escaping) {
  EXPECT_EQ(xml_escape("a<b>&\"'"), "a&lt;b&gt;&amp;&quot;&#39;");
  EXPECT_EQ(xml_escape("tab\tnl\ncr\r bell\x07"), "tab\tnl\ncr\r bell ");
  EXPECT_EQ(valid_utf8("ok \xc3\xa9 \xff end"), "ok \xc3\xa9 \xef\xbf\xbd end");
  EXPECT_EQ(valid_utf8("\xe2\x82"), "\xef\xbf\xbd\xef\xbf\xbd");       // truncated sequence
  EXPECT_EQ(valid_utf8("\xc0\xaf"), "\xef\xbf\xbd\xef\xbf\xbd");       // overlong
  EXPECT_EQ(valid_utf8("\xed\xa0\x80"), "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // surrogate
  EXPECT_EQ(md_cell("a|b\nc<d"), "a\\|b c&lt;d");
  EXPECT_EQ(first_line("\n  \n  first line  \nsecond"), "first line");
  EXPECT_EQ(first_line("abcdef", 3), "abc...");
  EXPECT_EQ(first_line("\xc3\xa9\xc3\xa9", 3), "\xc3\xa9...");  // never cuts a character
  EXPECT_EQ(format_us(1234.4), "1234");
  EXPECT_EQ(format_us(123.46), "123.5");
  EXPECT_EQ(format_us(1.23456), "1.235");
  EXPECT_EQ(format_timing(100, 98, 103), "100.0 (98.00-103.0)");
  EXPECT_EQ(format_timing(100, std::nullopt, 103), "100.0");
  EXPECT_EQ(format_percent(0.05), "5%");
  EXPECT_EQ(format_percent(0.025), "2.5%");
}

}  // namespace
}  // namespace ft::db::report
