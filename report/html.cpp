// A self-contained HTML page: the summary, the header facts, a table of every
// key and inline SVG charts of time against tokens per problem, device and
// kind. Nothing is loaded from elsewhere (no scripts, fonts, images or links).
#include <algorithm>
#include <map>
#include <tuple>

#include <fmt/format.h>

#include "report/chart.hpp"
#include "report/report.hpp"
#include "report/text.hpp"

namespace ft::db::report {

namespace {

constexpr const char* kPageCss = R"(body{font:14px/1.45 system-ui,sans-serif;color:#222;margin:24px;max-width:1400px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px}
.status-failed{color:#b00020}.status-passed{color:#1b7a2b}
table{border-collapse:collapse;margin:6px 0}th,td{border:1px solid #ddd;padding:3px 8px;vertical-align:top}
th{background:#f4f4f4;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
code{font:12px ui-monospace,monospace;word-break:break-all}
td.num{white-space:nowrap}td.why{max-width:420px;font-size:13px}h3{font-size:15px;margin:18px 0 4px}
.notice{background:#fff6d6;border-left:4px solid #e0a800;padding:6px 10px;margin:6px 0}
tr.v-broken td.verdict,tr.v-regression td.verdict{color:#b00020;font-weight:600}
tr.v-improvement td.verdict{color:#1b7a2b;font-weight:600}
tr.v-missing td.verdict,tr.v-new td.verdict{color:#8a5a00}
figure{margin:10px 0}figcaption{font-size:12px;color:#555}
.charts{display:flex;flex-wrap:wrap;gap:12px}
)";

std::string page_start(std::string_view title) {
  return fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>{}</title>\n"
      "<style>\n{}{}</style>\n</head>\n<body>\n",
      xml_escape(title), kPageCss, detail::kChartCss);
}

constexpr const char* kPageEnd = "</body>\n</html>\n";

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out.empty() ? "none" : out;
}

std::string source_rows(std::string_view role, const SourceInfo& s) {
  return fmt::format("<tr><th>{}</th><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td></tr>\n",
                     role, xml_escape(s.path), xml_escape(join(s.devices)), xml_escape(join(s.toolchains)),
                     xml_escape(join(s.builds)), s.winners);
}

std::string timing_cell(const std::optional<Winner>& w) {
  return w ? format_timing(w->timing.median_us, w->timing.p10_us, w->timing.p90_us) : "-";
}

detail::ChartPoint point_of(int tokens, const Timing& t, std::string tooltip, std::string css_class = {}) {
  return {tokens, t.median_us, t.low(), t.high(), std::move(css_class), std::move(tooltip)};
}

// Charts group keys by problem, device and kind, in report order.
using ChartKey = std::tuple<std::string, std::string, std::string>;

std::string charts_section(const std::vector<std::pair<ChartKey, detail::Chart>>& charts) {
  std::string out = "<h2>Time against tokens</h2>\n<div class=\"charts\">\n";
  std::size_t drawn = 0;
  for (const auto& [key, chart] : charts) {
    std::string svg = detail::svg_chart(chart);
    if (svg.empty()) continue;
    ++drawn;
    out += "<figure>\n" + svg + fmt::format("<figcaption>{}</figcaption>\n</figure>\n",
                                            xml_escape(fmt::format("{} on {}, {}", std::get<0>(key), std::get<1>(key),
                                                                   std::get<2>(key))));
  }
  out += "</div>\n";
  if (drawn == 0) return "<h2>Time against tokens</h2>\n<p>No timed winners to chart.</p>\n";
  return out;
}

detail::Chart& chart_for(std::vector<std::pair<ChartKey, detail::Chart>>& charts, const Key& k,
                         const std::vector<std::pair<std::string, std::string>>& series) {
  ChartKey ck{k.problem, k.device, k.kind};
  for (auto& [key, chart] : charts)
    if (key == ck) return chart;
  detail::Chart chart;
  chart.title = fmt::format("{}: {}", k.kind, k.problem);
  for (const auto& [name, cls] : series) chart.series.push_back({name, cls, cls == "floor", {}});
  return charts.emplace_back(ck, std::move(chart)).second;
}

}  // namespace

std::string to_html(const Comparison& c, std::span<const Verdict> fail_on) {
  const bool failed = c.fails(fail_on);
  std::string out = page_start("flytune report");
  out += fmt::format("<h1>flytune report: <span class=\"status-{0}\">{0}</span></h1>\n<p class=\"summary\">{1}</p>\n",
                     failed ? "failed" : "passed", xml_escape(summary_line(c)));
  out += "<table class=\"sources\">\n<tr><th></th><th>database</th><th>devices</th><th>toolchains</th><th>flytune</th>"
         "<th>winners</th></tr>\n";
  out += source_rows("baseline", c.baseline) + source_rows("current", c.current) + "</table>\n";
  std::vector<std::string> fail_names;
  for (Verdict v : fail_on) fail_names.emplace_back(to_string(v));
  out += fmt::format(
      "<p>A change counts beyond the {} threshold only when the p10-p90 intervals do not overlap. Fails on: {}.</p>\n",
      format_percent(c.threshold), xml_escape(fail_names.empty() ? "nothing" : join(fail_names)));
  for (const std::string& n : c.notices) out += fmt::format("<p class=\"notice\">{}</p>\n", xml_escape(n));

  // One table per problem and device, keys most severe first.
  out += "<h2>Keys</h2>\n";
  std::vector<std::pair<std::string, std::string>> groups;
  for (const KeyResult& k : c.keys)
    if (std::find(groups.begin(), groups.end(), std::make_pair(k.key.problem, k.key.device)) == groups.end())
      groups.emplace_back(k.key.problem, k.key.device);
  for (const auto& [problem, device] : groups) {
    out += fmt::format("<h3>{} on {}</h3>\n", xml_escape(problem), xml_escape(device));
    out += "<table class=\"keys\">\n<tr><th>verdict</th><th>kind</th><th>tokens</th><th>baseline us<br>(p10-p90)</th>"
           "<th>current us<br>(p10-p90)</th><th>ratio</th><th>floor us</th><th>winner</th><th>why</th></tr>\n";
    for (Verdict v : kAllVerdicts)
      for (const KeyResult& k : c.keys) {
        if (k.verdict != v || k.key.problem != problem || k.key.device != device) continue;
        std::string winner;
        if (k.baseline && k.current && k.baseline->kernel_name != k.current->kernel_name)
          winner = fmt::format("<code>{}</code><br>&rarr; <code>{}</code>", xml_escape(k.baseline->kernel_name),
                               xml_escape(k.current->kernel_name));
        else
          winner = fmt::format("<code>{}</code>", xml_escape((k.current ? k.current : k.baseline)->kernel_name));
        std::string why = xml_escape(k.reason);
        for (std::size_t i = 1; i < k.failures.size(); ++i) {  // the reason already names the first
          const KernelFailure& f = k.failures[i];
          why += fmt::format("<br><code>{}</code> {}: {}", xml_escape(f.kernel_name), xml_escape(f.status),
                             xml_escape(first_line(f.message, 400)));
        }
        out += fmt::format(
            "<tr class=\"v-{0}\"><td class=\"verdict\">{0}</td><td>{1}</td><td class=\"num\">{2}</td>"
            "<td class=\"num\">{3}</td><td class=\"num\">{4}</td><td class=\"num\">{5}</td><td class=\"num\">{6}</td>"
            "<td>{7}</td><td class=\"why\">{8}</td></tr>\n",
            to_string(k.verdict), xml_escape(k.key.kind), k.key.tokens, timing_cell(k.baseline), timing_cell(k.current),
            k.ratio ? fmt::format("{:.3f}", *k.ratio) : "-", k.floor_us ? format_us(*k.floor_us) : "-", winner, why);
      }
    out += "</table>\n";
  }

  std::vector<std::pair<ChartKey, detail::Chart>> charts;
  for (const KeyResult& k : c.keys) {
    detail::Chart& chart = chart_for(charts, k.key, {{"baseline", "baseline"}, {"current", "current"}, {"roofline floor", "floor"}});
    if (k.baseline)
      chart.series[0].points.push_back(point_of(
          k.key.tokens, k.baseline->timing,
          fmt::format("baseline T={}: {} us, {}", k.key.tokens, timing_cell(k.baseline), k.baseline->kernel_name)));
    if (k.current)
      chart.series[1].points.push_back(point_of(
          k.key.tokens, k.current->timing,
          fmt::format("current T={}: {} us, {} ({})", k.key.tokens, timing_cell(k.current), k.current->kernel_name,
                      to_string(k.verdict)),
          k.verdict == Verdict::unchanged ? "" : "v-" + std::string(to_string(k.verdict))));
    if (k.floor_us)
      chart.series[2].points.push_back(
          {k.key.tokens, *k.floor_us, *k.floor_us, *k.floor_us, {}, fmt::format("floor T={}: {} us", k.key.tokens, format_us(*k.floor_us))});
  }
  for (auto& [key, chart] : charts)
    std::erase_if(chart.series, [](const detail::ChartSeries& s) { return s.points.empty(); });
  out += charts_section(charts);
  out += "<p>Markers: red = regression, black = broken, green = improvement, hollow = new; bars span p10-p90.</p>\n";
  out += kPageEnd;
  return out;
}

std::string to_html(const Summary& s) {
  std::string out = page_start("flytune summary");
  out += fmt::format("<h1>flytune summary</h1>\n<p class=\"summary\">{}</p>\n", xml_escape(summary_line(s)));
  out += "<table class=\"sources\">\n<tr><th></th><th>database</th><th>devices</th><th>toolchains</th><th>flytune</th>"
         "<th>winners</th></tr>\n" + source_rows("database", s.source) + "</table>\n";
  for (const std::string& n : s.notices) out += fmt::format("<p class=\"notice\">{}</p>\n", xml_escape(n));

  // Winners arrive sorted by problem and device: a heading and table per pair.
  out += "<h2>Winners</h2>\n";
  if (s.winners.empty()) out += "<p>No winners recorded.</p>\n";
  std::vector<std::pair<ChartKey, detail::Chart>> charts;
  for (std::size_t i = 0; i < s.winners.size(); ++i) {
    const SummaryRow& r = s.winners[i];
    const bool first = i == 0 || s.winners[i - 1].key.problem != r.key.problem || s.winners[i - 1].key.device != r.key.device;
    if (first) {
      if (i > 0) out += "</table>\n";
      out += fmt::format("<h3>{} on {}</h3>\n", xml_escape(r.key.problem), xml_escape(r.key.device));
      out += "<table class=\"winners\">\n<tr><th>kind</th><th>tokens</th><th>median us (p10-p90)</th><th>floor us</th>"
             "<th>% of floor</th><th>vs default</th><th>kernel</th><th>toolchain</th></tr>\n";
    }
    const Winner& w = r.winner;
    out += fmt::format(
        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>"
        "<td class=\"num\">{}</td><td class=\"num\">{}</td><td><code>{}</code></td><td>{}</td></tr>\n",
        xml_escape(r.key.kind), r.key.tokens, format_timing(w.timing.median_us, w.timing.p10_us, w.timing.p90_us),
        r.floor_us ? format_us(*r.floor_us) : "-", r.floor_fraction ? fmt::format("{:.0f}%", *r.floor_fraction * 100) : "-",
        w.speedup_vs_default ? fmt::format("{:.2f}x", *w.speedup_vs_default) : "-", xml_escape(w.kernel_name),
        xml_escape(w.toolchain));
    detail::Chart& chart = chart_for(charts, r.key, {{"winner", "winner"}, {"roofline floor", "floor"}});
    chart.series[0].points.push_back(point_of(r.key.tokens, w.timing,
                                              fmt::format("T={}: {} us, {}", r.key.tokens,
                                                          format_timing(w.timing.median_us, w.timing.p10_us, w.timing.p90_us),
                                                          w.kernel_name)));
    if (r.floor_us)
      chart.series[1].points.push_back(
          {r.key.tokens, *r.floor_us, *r.floor_us, *r.floor_us, {}, fmt::format("floor T={}: {} us", r.key.tokens, format_us(*r.floor_us))});
  }
  if (!s.winners.empty()) out += "</table>\n";
  for (auto& [key, chart] : charts)
    std::erase_if(chart.series, [](const detail::ChartSeries& x) { return x.points.empty(); });
  out += charts_section(charts);

  out += "<h2>Failures</h2>\n";
  auto counts = [](const std::map<std::string, std::int64_t>& m) {
    std::string text;
    for (const auto& [k, n] : m) text += (text.empty() ? "" : ", ") + fmt::format("{} {}", k, n);
    return text.empty() ? std::string("none") : text;
  };
  out += fmt::format("<p>Variants by compile status: {}. Latest measurements by status: {}.</p>\n",
                     xml_escape(counts(s.compile_counts)), xml_escape(counts(s.measurement_counts)));
  if (s.failures.empty()) {
    out += "<p>No failed kernels.</p>\n";
  } else {
    out += "<table class=\"failures\">\n<tr><th>kernel</th><th>status</th><th>problem</th><th>device</th><th>tokens</th>"
           "<th>message</th></tr>\n";
    for (const FailedKernel& f : s.failures)
      out += fmt::format("<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td><td class=\"num\">{}</td><td>{}</td></tr>\n",
                         xml_escape(f.kernel_name), xml_escape(f.status), f.problem.empty() ? "-" : xml_escape(f.problem),
                         f.device.empty() ? "-" : xml_escape(f.device), f.tokens ? std::to_string(*f.tokens) : "-",
                         xml_escape(first_line(f.message, 400)));
    out += "</table>\n";
  }
  out += kPageEnd;
  return out;
}

}  // namespace ft::db::report
