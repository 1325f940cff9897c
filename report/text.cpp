#include "report/text.hpp"

#include <cmath>
#include <cstdint>

#include <fmt/format.h>

namespace ft::db::report {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
std::size_t utf8_sequence_length(std::string_view s, std::size_t i) {
  const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) n = 2, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 3, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are invalid.
  static constexpr std::uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

}  // namespace

std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    std::size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char ch : valid_utf8(s)) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default:
        if ((c < 0x20 && ch != '\t' && ch != '\n' && ch != '\r') || c == 0x7F) out += ' ';
        else out += ch;
    }
  }
  return out;
}

std::string md_cell(std::string_view s) {
  std::string out;
  for (char ch : xml_escape(s)) {
    if (ch == '\n' || ch == '\r' || ch == '\t') out += ' ';
    else if (ch == '|') out += "\\|";
    else out += ch;
  }
  return out;
}

std::string first_line(std::string_view s, std::size_t max_chars) {
  std::size_t start = 0;
  while (start < s.size()) {
    std::size_t end = s.find('\n', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view line = s.substr(start, end - start);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (!line.empty()) {
      std::string text = valid_utf8(line);
      if (text.size() <= max_chars) return text;
      std::size_t cut = max_chars;
      while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // not inside a character
      return text.substr(0, cut) + "...";
    }
    start = end + 1;
  }
  return {};
}

std::string format_us(double us) {
  if (!std::isfinite(us)) return "-";
  if (us >= 1000) return fmt::format("{:.0f}", us);
  if (us >= 100) return fmt::format("{:.1f}", us);
  if (us >= 10) return fmt::format("{:.2f}", us);
  return fmt::format("{:.3f}", us);
}

std::string format_timing(double median, std::optional<double> p10, std::optional<double> p90) {
  if (p10 && p90) return fmt::format("{} ({}-{})", format_us(median), format_us(*p10), format_us(*p90));
  return format_us(median);
}

std::string format_percent(double fraction) {
  const double pct = fraction * 100;
  if (std::abs(pct - std::round(pct)) < 1e-9) return fmt::format("{:.0f}%", pct);
  return fmt::format("{:.3g}%", pct);
}

}  // namespace ft::db::report
