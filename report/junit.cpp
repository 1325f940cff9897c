// JUnit XML for CI dashboards: one test suite per problem and device, one test
// case per key; verdicts in the fail-on set are <failure>s, missing keys are
// <skipped/> when they do not fail.
#include <algorithm>

#include <fmt/format.h>

#include "report/report.hpp"
#include "report/text.hpp"

namespace ft::db::report {

namespace {

bool in(std::span<const Verdict> set, Verdict v) { return std::find(set.begin(), set.end(), v) != set.end(); }

std::string timing_text(const std::optional<Winner>& w) {
  if (!w) return "none";
  return fmt::format("{} us ({}) {}", format_timing(w->timing.median_us, w->timing.p10_us, w->timing.p90_us),
                     w->kernel_name, w->toolchain);
}

std::string details(const KeyResult& k) {
  std::string text = fmt::format("{}\nbaseline: {}\ncurrent: {}\n", k.reason, timing_text(k.baseline), timing_text(k.current));
  if (k.ratio) text += fmt::format("ratio: {:.4f}\n", *k.ratio);
  for (const KernelFailure& f : k.failures)
    text += fmt::format("\n{} ({}{}):\n{}\n", f.kernel_name, f.status, f.tokens ? fmt::format(", T={}", *f.tokens) : "",
                        f.message);
  return text;
}

struct Case {
  std::string name;
  double seconds = 0;
  std::string failure_type;  // empty: passed
  std::string message;
  std::string body;
  bool skipped = false;
};

struct Suite {
  std::string name;
  std::vector<Case> cases;
};

std::string render_suites(std::string_view title, const std::vector<Suite>& suites) {
  std::size_t tests = 0, failures = 0, skipped = 0;
  for (const Suite& s : suites)
    for (const Case& c : s.cases) {
      ++tests;
      failures += c.failure_type.empty() ? 0 : 1;
      skipped += c.skipped ? 1 : 0;
    }
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  out += fmt::format("<testsuites name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">\n",
                     xml_escape(title), tests, failures, skipped);
  for (const Suite& s : suites) {
    std::size_t f = 0, sk = 0;
    for (const Case& c : s.cases) {
      f += c.failure_type.empty() ? 0 : 1;
      sk += c.skipped ? 1 : 0;
    }
    out += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"{}\">\n",
                       xml_escape(s.name), s.cases.size(), f, sk);
    for (const Case& c : s.cases) {
      out += fmt::format("    <testcase classname=\"{}\" name=\"{}\" time=\"{:.6f}\"", xml_escape(s.name),
                         xml_escape(c.name), c.seconds);
      if (c.failure_type.empty() && !c.skipped && c.body.empty()) {
        out += "/>\n";
        continue;
      }
      out += ">\n";
      if (!c.failure_type.empty())
        out += fmt::format("      <failure type=\"{}\" message=\"{}\">{}</failure>\n", xml_escape(c.failure_type),
                           xml_escape(c.message), xml_escape(c.body));
      else if (c.skipped)
        out += fmt::format("      <skipped message=\"{}\"/>\n", xml_escape(c.message));
      if (c.failure_type.empty() && !c.body.empty())
        out += fmt::format("      <system-out>{}</system-out>\n", xml_escape(c.body));
      out += "    </testcase>\n";
    }
    out += "  </testsuite>\n";
  }
  out += "</testsuites>\n";
  return out;
}

Suite& suite_for(std::vector<Suite>& suites, const std::string& name) {
  for (Suite& s : suites)
    if (s.name == name) return s;
  return suites.emplace_back(Suite{name, {}});
}

}  // namespace

std::string to_junit(const Comparison& c, std::span<const Verdict> fail_on) {
  std::vector<Suite> suites;
  for (const KeyResult& k : c.keys) {
    Case tc;
    tc.name = fmt::format("{} T={}", k.key.kind, k.key.tokens);
    const auto& w = k.current ? k.current : k.baseline;
    tc.seconds = w ? w->timing.median_us * 1e-6 : 0;
    tc.body = details(k);
    if (in(fail_on, k.verdict)) {
      tc.failure_type = std::string(to_string(k.verdict));
      tc.message = fmt::format("{}: {}", to_string(k.verdict), first_line(k.reason, 300));
    } else if (k.verdict == Verdict::missing) {
      tc.skipped = true;
      tc.message = k.reason;
    }
    suite_for(suites, fmt::format("{} on {}", k.key.problem, k.key.device)).cases.push_back(std::move(tc));
  }
  return render_suites(fmt::format("flytune report: {}", summary_line(c)), suites);
}

std::string to_junit(const Summary& s) {
  std::vector<Suite> suites;
  for (const SummaryRow& r : s.winners) {
    Case tc;
    tc.name = fmt::format("{} T={}", r.key.kind, r.key.tokens);
    tc.seconds = r.winner.timing.median_us * 1e-6;
    tc.body = fmt::format("{} us {} {}", format_timing(r.winner.timing.median_us, r.winner.timing.p10_us, r.winner.timing.p90_us),
                          r.winner.kernel_name, r.winner.toolchain);
    suite_for(suites, fmt::format("{} on {}", r.key.problem, r.key.device)).cases.push_back(std::move(tc));
  }
  for (const FailedKernel& f : s.failures) {
    Case tc;
    tc.name = f.tokens ? fmt::format("{} T={}", f.kernel_name, *f.tokens) : f.kernel_name;
    tc.failure_type = f.status;
    tc.message = fmt::format("{}: {}", f.status, first_line(f.message, 300));
    tc.body = f.message;
    const std::string where = f.problem.empty() ? f.target : fmt::format("{} on {}", f.problem, f.device);
    suite_for(suites, fmt::format("failures: {}", where)).cases.push_back(std::move(tc));
  }
  return render_suites(fmt::format("flytune summary: {}", summary_line(s)), suites);
}

}  // namespace ft::db::report
