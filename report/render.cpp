// Format selection and the one-line summaries every format starts with.
#include <fmt/format.h>

#include "report/report.hpp"
#include "report/text.hpp"

namespace ft::db::report {

Result<Format> parse_format(std::string_view s) {
  if (s == "md" || s == "markdown") return Format::markdown;
  if (s == "junit") return Format::junit;
  if (s == "json") return Format::json;
  if (s == "html") return Format::html;
  return fail(Errc::usage, fmt::format("unknown format '{}' (known: md, junit, json, html)", s));
}

namespace {

std::string count_text(Verdict v, int n) {
  switch (v) {
    case Verdict::regression: return fmt::format("{} regression{}", n, n == 1 ? "" : "s");
    case Verdict::improvement: return fmt::format("{} improvement{}", n, n == 1 ? "" : "s");
    default: return fmt::format("{} {}", n, to_string(v));
  }
}

}  // namespace

std::string summary_line(const Comparison& c) {
  std::string out;
  const VerdictCounts counts = c.counts();
  for (Verdict v : kAllVerdicts) out += (out.empty() ? "" : ", ") + count_text(v, counts.at(v));
  return fmt::format("{} ({} key{}, threshold {})", out, c.keys.size(), c.keys.size() == 1 ? "" : "s",
                     format_percent(c.threshold));
}

std::string summary_line(const Summary& s) {
  std::size_t compile_errors = 0;
  for (const FailedKernel& f : s.failures) compile_errors += f.status == "compile_error" ? 1 : 0;
  return fmt::format("{} winner{}, {} compile error{}, {} failed measurement{}", s.winners.size(),
                     s.winners.size() == 1 ? "" : "s", compile_errors, compile_errors == 1 ? "" : "s",
                     s.failures.size() - compile_errors, s.failures.size() - compile_errors == 1 ? "" : "s");
}

std::string render(const Comparison& c, Format format, std::span<const Verdict> fail_on) {
  switch (format) {
    case Format::markdown: return to_markdown(c, fail_on);
    case Format::junit: return to_junit(c, fail_on);
    case Format::json: return to_json(c, fail_on).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    case Format::html: return to_html(c, fail_on);
  }
  return {};
}

std::string render(const Summary& s, Format format) {
  switch (format) {
    case Format::markdown: return to_markdown(s);
    case Format::junit: return to_junit(s);
    case Format::json: return to_json(s).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    case Format::html: return to_html(s);
  }
  return {};
}

}  // namespace ft::db::report
