// The HTML report opened in headless chromium, offline: it must produce a
// screenshot that shows more than an empty page does, and its DOM, as the
// browser parsed it, must hold the SVG charts.
#include <cstdint>
#include <filesystem>

#include <gtest/gtest.h>

#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/report/report_test_support.hpp"

namespace ft {
namespace {

using test::ScratchDir;

std::optional<std::string> chromium() {
  for (const char* name : {"chromium", "chromium-browser"})
    if (auto path = find_executable(name)) return *path;
  return std::nullopt;
}

std::size_t count(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

struct Png {
  std::uint32_t width = 0, height = 0;
  std::size_t bytes = 0;
};

// Width and height from the IHDR chunk; nullopt if not a PNG.
std::optional<Png> read_png(const std::string& path) {
  const std::string data = test::read_bytes(path);
  if (data.size() < 24 || data.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0 || data.compare(12, 4, "IHDR") != 0) return std::nullopt;
  auto be32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (std::size_t i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(data[at + i]);
    return v;
  };
  return Png{be32(16), be32(20), data.size()};
}

class HtmlInChromium : public ::testing::Test {
 protected:
  void SetUp() override {
    auto exe = chromium();
    if (!exe) GTEST_SKIP() << "chromium is not installed (Debian package chromium; scripts/setup.sh installs it)";
    chromium_ = *exe;
    test::TestDb b(dir_.file("baseline.db"));
    test::fill_baseline(b);
    test::TestDb c(dir_.file("current.db"));
    test::fill_current(c);
  }

  // Runs headless chromium offline on `page` with its own profile; stderr (D-Bus noise) is dropped.
  ProcessOutput browse(const std::string& page, const std::string& mode_flag) {
    static int profile = 0;
    std::vector<std::string> argv{"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>/dev/null", chromium_,
                                  "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                                  "--disable-component-update", "--disable-sync", "--no-first-run",
                                  "--hide-scrollbars", "--window-size=1280,1600",
                                  "--user-data-dir=" + dir_.file("profile" + std::to_string(profile++)), mode_flag,
                                  "file://" + page};
    auto r = run_capture(argv, {}, std::chrono::seconds(120));
    if (!r) return ProcessOutput{-1, 0, false, r.error().describe()};
    return *r;
  }

  ScratchDir dir_;
  std::string chromium_;
};

TEST_F(HtmlInChromium, ComparisonRendersWithItsCharts) {
  const std::string page = dir_.file("report.html");
  auto r = test::run_flytune({"report", "--baseline", dir_.file("baseline.db"), "--current", dir_.file("current.db"),
                              "--format", "html", "--out", page});
  ASSERT_EQ(r.exit_code, 3) << r.output;  // the standard pair has regressions: exit 3
  ASSERT_TRUE(std::filesystem::exists(page));

  // The DOM as the browser built it: three charts with lines, markers and titles.
  auto dom = browse(page, "--dump-dom");
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  EXPECT_EQ(count(dom.output, "<svg "), 3u) << dom.output.substr(0, 2000);
  EXPECT_GE(count(dom.output, "<polyline "), 5u);
  EXPECT_GE(count(dom.output, "<circle "), 20u);
  EXPECT_NE(dom.output.find("s-current v-regression"), std::string::npos);
  EXPECT_NE(dom.output.find("flytune report: <span class=\"status-failed\">failed</span>"), std::string::npos);

  // A screenshot with the charts holds far more than one of an empty page.
  const std::string blank = dir_.file("blank.html");
  test::write_bytes(blank, "<!DOCTYPE html><html><head><meta charset=\"utf-8\"></head><body></body></html>\n");
  const std::string shot = dir_.file("report.png"), blank_shot = dir_.file("blank.png");
  auto s1 = browse(page, "--screenshot=" + shot);
  auto s2 = browse(blank, "--screenshot=" + blank_shot);
  ASSERT_EQ(s1.exit_code, 0) << s1.output;
  ASSERT_EQ(s2.exit_code, 0) << s2.output;
  auto png = read_png(shot);
  auto empty = read_png(blank_shot);
  ASSERT_TRUE(png) << "no PNG screenshot at " << shot;
  ASSERT_TRUE(empty);
  EXPECT_EQ(png->width, 1280u);
  EXPECT_EQ(png->height, 1600u);
  EXPECT_GT(png->bytes, 4 * empty->bytes) << "the report's screenshot (" << png->bytes
                                          << " bytes) looks as empty as a blank page's (" << empty->bytes << ")";
}

TEST_F(HtmlInChromium, SummaryRendersWithItsCharts) {
  const std::string page = dir_.file("summary.html");
  auto r = test::run_flytune({"report", "--db", dir_.file("current.db"), "--format", "html", "--out", page});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto dom = browse(page, "--dump-dom");
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  EXPECT_EQ(count(dom.output, "<svg "), 3u);
  EXPECT_NE(dom.output.find("class=\"s-floor dashed\""), std::string::npos);  // the H200 layer floor
  EXPECT_NE(dom.output.find("<table class=\"failures\">"), std::string::npos);
  const std::string shot = dir_.file("summary.png");
  auto s = browse(page, "--screenshot=" + shot);
  ASSERT_EQ(s.exit_code, 0) << s.output;
  auto png = read_png(shot);
  ASSERT_TRUE(png);
  EXPECT_GT(png->bytes, 10000u);
}

}  // namespace
}  // namespace ft
