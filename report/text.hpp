#pragma once
// Text helpers shared by the report's renderers: safe UTF-8, escaping for
// XML/HTML and Markdown table cells, short forms of long messages, numbers.
#include <optional>
#include <string>
#include <string_view>

namespace ft::db::report {

// Invalid UTF-8 sequences become U+FFFD; compiler logs may hold any bytes.
std::string valid_utf8(std::string_view s);
// XML 1.0 / HTML text and attribute values: valid UTF-8, & < > " ' escaped,
// control characters other than tab, newline and carriage return as spaces.
std::string xml_escape(std::string_view s);
// A Markdown table cell: one line, | escaped, HTML special characters as entities.
std::string md_cell(std::string_view s);
// The first non-empty line, cut to `max_chars` bytes (at a UTF-8 boundary) with "...".
std::string first_line(std::string_view s, std::size_t max_chars = 160);

// "123.4", "1.23" or "12345": a time in microseconds with 4 significant digits.
std::string format_us(double us);
// "123.4 (120.1-130.2)", or "123.4" without a spread, "-" when absent.
std::string format_timing(double median, std::optional<double> p10, std::optional<double> p90);
// "5%", "2.5%".
std::string format_percent(double fraction);

}  // namespace ft::db::report
