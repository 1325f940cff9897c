#include "report/chart.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "report/text.hpp"

namespace ft::db::report::detail {

const char* const kChartCss = R"(svg.chart{background:#fff;border:1px solid #ddd;margin:4px 0}
svg.chart text{font:11px system-ui,sans-serif;fill:#333}
svg.chart .title{font-size:13px;font-weight:600}
svg.chart .grid{stroke:#e6e6e6;stroke-width:1}
svg.chart .axis{stroke:#555;stroke-width:1}
svg.chart polyline{fill:none;stroke-width:2}
svg.chart .bar{stroke-width:1.2}
svg.chart .s-baseline{stroke:#7f7f7f}svg.chart circle.s-baseline{fill:#7f7f7f}
svg.chart .s-current,svg.chart .s-winner{stroke:#1f6fb4}svg.chart circle.s-current,svg.chart circle.s-winner{fill:#1f6fb4}
svg.chart .s-floor{stroke:#2a9d3a}svg.chart circle.s-floor{fill:#2a9d3a}
svg.chart .dashed{stroke-dasharray:6 4}
svg.chart circle.v-regression{fill:#d62728;stroke:#d62728}
svg.chart circle.v-broken{fill:#000;stroke:#d62728;stroke-width:2}
svg.chart circle.v-improvement{fill:#2a9d3a;stroke:#2a9d3a}
svg.chart circle.v-new{fill:#fff;stroke:#1f6fb4;stroke-width:2}
)";

namespace {

constexpr double kWidth = 720, kHeight = 340;
constexpr double kLeft = 72, kRight = 170, kTop = 34, kBottom = 48;

struct Scale {
  double lo = 0, hi = 1, px_lo = 0, px_hi = 1;
  double operator()(double v) const { return px_lo + (v - lo) / (hi - lo) * (px_hi - px_lo); }
};

// Log-axis ticks at 1, 2 and 5 times powers of ten (only powers when crowded).
std::vector<double> log10_ticks(double lo, double hi) {
  auto at = [&](std::initializer_list<double> mantissas) {
    std::vector<double> ticks;
    for (int e = int(std::floor(lo)) - 1; e <= int(std::ceil(hi)); ++e)
      for (double m : mantissas) {
        double v = m * std::pow(10.0, e);
        if (std::log10(v) >= lo && std::log10(v) <= hi) ticks.push_back(v);
      }
    return ticks;
  };
  std::vector<double> ticks = at({1, 2, 5});
  if (ticks.size() > 8) ticks = at({1});
  if (ticks.size() < 3) ticks = at({1, 2, 3, 4, 5, 6, 7, 8, 9});  // a narrow range: every integer mantissa
  if (ticks.size() > 9) ticks = at({1, 2, 5});
  if (ticks.size() < 2) ticks = {std::pow(10.0, lo), std::pow(10.0, hi)};
  return ticks;
}

std::string num(double v) { return fmt::format("{:.1f}", v); }

}  // namespace

std::string svg_chart(const Chart& chart) {
  double ymin = INFINITY, ymax = -INFINITY, xmin = INFINITY, xmax = -INFINITY;
  std::set<int> tokens;
  for (const ChartSeries& s : chart.series)
    for (const ChartPoint& p : s.points) {
      if (!(p.median_us > 0) || p.tokens < 1) continue;
      ymin = std::min({ymin, std::log10(p.median_us), p.low_us > 0 ? std::log10(p.low_us) : INFINITY});
      ymax = std::max({ymax, std::log10(p.median_us), p.high_us > 0 ? std::log10(p.high_us) : -INFINITY});
      xmin = std::min(xmin, std::log2(double(p.tokens)));
      xmax = std::max(xmax, std::log2(double(p.tokens)));
      tokens.insert(p.tokens);
    }
  if (tokens.empty()) return {};
  if (xmax - xmin < 1e-9) xmin -= 1, xmax += 1;
  if (ymax - ymin < 0.1) ymin -= 0.05, ymax += 0.05;
  const double xpad = (xmax - xmin) * 0.04, ypad = (ymax - ymin) * 0.06;
  const Scale x{xmin - xpad, xmax + xpad, kLeft, kWidth - kRight};
  const Scale y{ymin - ypad, ymax + ypad, kHeight - kBottom, kTop};
  auto px = [&](int t) { return x(std::log2(double(t))); };
  auto py = [&](double us) { return y(std::log10(us)); };

  std::string out = fmt::format(
      "<svg class=\"chart\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" role=\"img\" aria-label=\"{2}\">\n"
      "<title>{2}</title>\n<text class=\"title\" x=\"{3}\" y=\"20\">{2}</text>\n",
      kWidth, kHeight, xml_escape(chart.title), kLeft);

  // Grid and axes.
  for (double t : log10_ticks(y.lo, y.hi)) {
    const double yy = py(t);
    out += fmt::format("<line class=\"grid\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", num(kLeft), num(yy),
                       num(kWidth - kRight), num(yy));
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", num(kLeft - 6), num(yy + 4), fmt::format("{:g}", t));
  }
  double last_label = -1e9;
  for (int t : tokens) {
    const double xx = px(t);
    out += fmt::format("<line class=\"grid\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", num(xx), num(kTop),
                       num(kHeight - kBottom));
    if (xx - last_label >= 30) {
      out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(xx), num(kHeight - kBottom + 16), t);
      last_label = xx;
    }
  }
  out += fmt::format("<line class=\"axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\"/>", num(kLeft), num(kTop),
                     num(kHeight - kBottom));
  out += fmt::format("<line class=\"axis\" x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\"/>\n", num(kLeft),
                     num(kHeight - kBottom), num(kWidth - kRight));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">tokens (log scale)</text>\n",
                     num((kLeft + kWidth - kRight) / 2), num(kHeight - 10));
  out += fmt::format("<text x=\"14\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {0})\">time, us (log scale)</text>\n",
                     num((kTop + kHeight - kBottom) / 2));

  // Series: line, error bars, markers with hover titles; a legend entry each.
  double legend_y = kTop + 8;
  for (const ChartSeries& s : chart.series) {
    std::vector<ChartPoint> pts;
    for (const ChartPoint& p : s.points)
      if (p.median_us > 0 && p.tokens >= 1) pts.push_back(p);
    std::sort(pts.begin(), pts.end(), [](const ChartPoint& a, const ChartPoint& b) { return a.tokens < b.tokens; });
    const std::string cls = "s-" + s.css_class + (s.dashed ? " dashed" : "");
    if (pts.size() > 1) {
      std::string points;
      for (const ChartPoint& p : pts) points += fmt::format("{}{},{}", points.empty() ? "" : " ", num(px(p.tokens)), num(py(p.median_us)));
      out += fmt::format("<polyline class=\"{}\" points=\"{}\"/>\n", cls, points);
    }
    for (const ChartPoint& p : pts) {
      const double xx = px(p.tokens);
      if (p.low_us > 0 && p.high_us > p.low_us) {
        const double y1 = py(p.low_us), y2 = py(p.high_us);
        out += fmt::format("<line class=\"bar s-{0}\" x1=\"{1}\" y1=\"{2}\" x2=\"{1}\" y2=\"{3}\"/>", s.css_class, num(xx),
                           num(y1), num(y2));
        for (double yy : {y1, y2})
          out += fmt::format("<line class=\"bar s-{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\"/>", s.css_class, num(xx - 3),
                             num(yy), num(xx + 3), num(yy));
      }
      out += fmt::format("<circle class=\"s-{}{}\" cx=\"{}\" cy=\"{}\" r=\"{}\"><title>{}</title></circle>\n", s.css_class,
                         p.css_class.empty() ? "" : " " + p.css_class, num(xx), num(py(p.median_us)),
                         s.dashed ? "2.5" : "3.5", xml_escape(p.tooltip));
    }
    const double lx = kWidth - kRight + 14;
    out += fmt::format("<line class=\"{}\" x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke-width=\"2\"/>", cls, num(lx),
                       num(legend_y), num(lx + 22), num(legend_y));
    out += fmt::format("<text x=\"{}\" y=\"{}\">{}</text>\n", num(lx + 28), num(legend_y + 4), xml_escape(s.name));
    legend_y += 18;
  }
  out += "</svg>\n";
  return out;
}

}  // namespace ft::db::report::detail
