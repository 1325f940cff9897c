// Markdown for CI comments: a summary line, the header facts, a table of what
// changed and, folded away, the keys that did not.
#include <algorithm>

#include <fmt/format.h>

#include "report/report.hpp"
#include "report/text.hpp"

namespace ft::db::report {

namespace {

constexpr std::size_t kMaxFailureRows = 50;

std::string join(const std::vector<std::string>& items, std::string_view sep = ", ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : std::string(sep)) + s;
  return out.empty() ? "none" : out;
}

std::string source_line(std::string_view role, const SourceInfo& s) {
  return fmt::format("- **{}** `{}`: {} winner{}; devices: {}; toolchains: {}{}\n", role, md_cell(s.path), s.winners,
                     s.winners == 1 ? "" : "s", md_cell(join(s.devices)), md_cell(join(s.toolchains)),
                     s.builds.empty() ? "" : fmt::format("; flytune {}", md_cell(join(s.builds))));
}

std::string timing_cell(const std::optional<Winner>& w) {
  return w ? format_timing(w->timing.median_us, w->timing.p10_us, w->timing.p90_us) : "-";
}

std::string winner_cell(const KeyResult& k) {
  if (k.verdict == Verdict::broken) return md_cell(k.reason);
  if (k.baseline && k.current) {
    if (k.baseline->kernel_name == k.current->kernel_name) return fmt::format("`{}`", md_cell(k.current->kernel_name));
    return fmt::format("`{}` &rarr; `{}`", md_cell(k.baseline->kernel_name), md_cell(k.current->kernel_name));
  }
  const Winner& w = k.baseline ? *k.baseline : *k.current;
  return fmt::format("`{}`", md_cell(w.kernel_name));
}

void key_table(std::string& out, const std::vector<const KeyResult*>& rows) {
  out += "| verdict | problem | device | kind | tokens | baseline us (p10-p90) | current us (p10-p90) | ratio | winner |\n";
  out += "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |\n";
  for (const KeyResult* k : rows) {
    const bool bold = k->verdict == Verdict::broken || k->verdict == Verdict::regression;
    const std::string verdict(to_string(k->verdict));
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", bold ? fmt::format("**{}**", verdict) : verdict,
                       md_cell(k->key.problem), md_cell(k->key.device), md_cell(k->key.kind), k->key.tokens,
                       timing_cell(k->baseline), timing_cell(k->current),
                       k->ratio ? fmt::format("{:.3f}", *k->ratio) : "-", winner_cell(*k));
  }
}

}  // namespace

std::string to_markdown(const Comparison& c, std::span<const Verdict> fail_on) {
  std::string out;
  const bool failed = c.fails(fail_on);
  out += fmt::format("### flytune report: {}: {}\n\n", failed ? "FAILED" : "passed", summary_line(c));
  out += source_line("baseline", c.baseline);
  out += source_line("current", c.current);
  std::vector<std::string> fail_names;
  for (Verdict v : fail_on) fail_names.emplace_back(to_string(v));
  out += fmt::format(
      "- a change counts beyond the {} threshold only when the p10-p90 intervals do not overlap; fails on: {}\n",
      format_percent(c.threshold), fail_names.empty() ? "nothing" : join(fail_names));
  if (!c.notices.empty()) {
    out += "\n";
    for (const std::string& n : c.notices) out += "> **Note:** " + md_cell(n) + "\n>\n";
    out.resize(out.size() - 2);  // no trailing empty quote line
  }

  std::vector<const KeyResult*> changed, unchanged;
  for (Verdict v : kAllVerdicts)
    for (const KeyResult& k : c.keys)
      if (k.verdict == v) (v == Verdict::unchanged ? unchanged : changed).push_back(&k);
  out += "\n";
  if (changed.empty()) out += "Nothing changed beyond noise.\n";
  else key_table(out, changed);
  if (!unchanged.empty()) {
    out += fmt::format("\n<details><summary>{} unchanged key{}</summary>\n\n", unchanged.size(),
                       unchanged.size() == 1 ? "" : "s");
    key_table(out, unchanged);
    out += "\n</details>\n";
  }
  return out;
}

std::string to_markdown(const Summary& s) {
  std::string out;
  out += fmt::format("### flytune summary: {}\n\n", summary_line(s));
  out += source_line("database", s.source);
  for (const std::string& n : s.notices) out += "\n> **Note:** " + md_cell(n) + "\n";
  out += "\n";
  if (!s.winners.empty()) {
    out += "| problem | device | kind | tokens | median us (p10-p90) | floor us | % of floor | vs default | kernel |\n";
    out += "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n";
    for (const SummaryRow& r : s.winners) {
      const Winner& w = r.winner;
      out += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | `{}` |\n", md_cell(r.key.problem),
                         md_cell(r.key.device), md_cell(r.key.kind), r.key.tokens,
                         format_timing(w.timing.median_us, w.timing.p10_us, w.timing.p90_us),
                         r.floor_us ? format_us(*r.floor_us) : "-",
                         r.floor_fraction ? fmt::format("{:.0f}%", *r.floor_fraction * 100) : "-",
                         w.speedup_vs_default ? fmt::format("{:.2f}x", *w.speedup_vs_default) : "-",
                         md_cell(w.kernel_name));
    }
  }

  auto counts = [](const std::map<std::string, std::int64_t>& m) {
    std::string text;
    for (const auto& [k, n] : m) text += (text.empty() ? "" : ", ") + fmt::format("{} {}", k, n);
    return text.empty() ? std::string("none") : text;
  };
  out += fmt::format("\n**Variants** by compile status: {}. **Latest measurements** by status: {}.\n",
                     counts(s.compile_counts), counts(s.measurement_counts));
  if (s.failures.empty()) {
    out += "\nNo failed kernels.\n";
    return out;
  }
  out += "\n| kernel | status | problem | device | tokens | message |\n| --- | --- | --- | --- | ---: | --- |\n";
  for (std::size_t i = 0; i < s.failures.size() && i < kMaxFailureRows; ++i) {
    const FailedKernel& f = s.failures[i];
    out += fmt::format("| `{}` | {} | {} | {} | {} | {} |\n", md_cell(f.kernel_name), f.status,
                       f.problem.empty() ? "-" : md_cell(f.problem), f.device.empty() ? "-" : md_cell(f.device),
                       f.tokens ? std::to_string(*f.tokens) : "-", md_cell(first_line(f.message)));
  }
  if (s.failures.size() > kMaxFailureRows)
    out += fmt::format("\n... and {} more failed kernels (all of them: --format json).\n",
                       s.failures.size() - kMaxFailureRows);
  return out;
}

}  // namespace ft::db::report
