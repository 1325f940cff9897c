#pragma once
// Inline SVG line charts of time against token count, both on log scales,
// with p10-p90 error bars and a hover title per point. No scripts, fonts or
// external references: the SVG is text inside the HTML page.
#include <string>
#include <vector>

namespace ft::db::report::detail {

struct ChartPoint {
  int tokens = 0;
  double median_us = 0;
  double low_us = 0;   // error bar; equal to median_us for none
  double high_us = 0;
  std::string css_class;  // extra class of the marker (a verdict colour)
  std::string tooltip;
};

struct ChartSeries {
  std::string name;
  std::string css_class;  // line colour, see kChartCss
  bool dashed = false;
  std::vector<ChartPoint> points;
};

struct Chart {
  std::string title;
  std::vector<ChartSeries> series;
};

// CSS for the classes the charts use (series and verdict colours).
extern const char* const kChartCss;

// The <svg> element; empty when no series has a positive time.
std::string svg_chart(const Chart& chart);

}  // namespace ft::db::report::detail
