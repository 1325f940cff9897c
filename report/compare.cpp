// Baseline against current: keys, device pairing, the noise rule, breakage.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>

#include <fmt/format.h>

#include "report/collect.hpp"
#include "report/report.hpp"
#include "report/text.hpp"

namespace ft::db::report {

using detail::device_label;

std::string_view to_string(Verdict v) {
  switch (v) {
    case Verdict::broken: return "broken";
    case Verdict::regression: return "regression";
    case Verdict::missing: return "missing";
    case Verdict::new_key: return "new";
    case Verdict::improvement: return "improvement";
    case Verdict::unchanged: return "unchanged";
  }
  return "unknown";
}

Result<Verdict> parse_verdict(std::string_view s) {
  for (Verdict v : kAllVerdicts)
    if (to_string(v) == s) return v;
  return fail(Errc::usage,
              fmt::format("unknown verdict '{}' (known: broken, regression, missing, new, improvement, unchanged)", s));
}

Result<std::vector<Verdict>> parse_verdict_list(std::string_view s) {
  std::vector<Verdict> out;
  if (s == "none") return out;
  std::size_t start = 0;
  while (start <= s.size()) {
    std::size_t end = s.find(',', start);
    if (end == std::string_view::npos) end = s.size();
    std::string_view item = s.substr(start, end - start);
    if (item.empty()) return fail(Errc::usage, fmt::format("empty verdict in '{}'", s));
    Verdict v = FT_TRY(parse_verdict(item));
    if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    start = end + 1;
  }
  return out;
}

Result<double> parse_threshold(std::string_view s) {
  const bool percent = !s.empty() && s.back() == '%';
  std::string_view number = percent ? s.substr(0, s.size() - 1) : s;
  double value = 0;
  auto [end, ec] = std::from_chars(number.data(), number.data() + number.size(), value);
  if (number.empty() || ec != std::errc() || end != number.data() + number.size() || !std::isfinite(value) || value < 0)
    return fail(Errc::usage, fmt::format("threshold '{}' is not a number like 5% or 0.05", s));
  if (percent) value /= 100;
  else if (value >= 1)
    return fail(Errc::usage, fmt::format("threshold '{}' is a fraction of 1 or more; write {}% for percent or 0.05 for 5%", s, s));
  if (value >= 1) return fail(Errc::usage, fmt::format("threshold '{}' must be below 100%", s));
  return value;
}

double Timing::low() const { return has_spread() ? std::min(*p10_us, median_us) : median_us; }
double Timing::high() const { return has_spread() ? std::max(*p90_us, median_us) : median_us; }

TimingVerdict judge_timing(const Timing& b, const Timing& c, double threshold) {
  TimingVerdict out;
  out.ratio = b.median_us > 0 ? c.median_us / b.median_us : 1.0;
  const std::string pct = format_percent(threshold);
  const std::string change = fmt::format("{:.3f}x the baseline time", out.ratio);
  const bool slower = c.median_us > b.median_us * (1 + threshold);
  const bool faster = c.median_us < b.median_us * (1 - threshold);
  if (!slower && !faster) {
    out.reason = fmt::format("{}, within the {} threshold", change, pct);
    return out;
  }
  const bool separate = slower ? c.low() > b.high() : c.high() < b.low();
  const std::string spread = b.has_spread() && c.has_spread() ? "p10-p90" : "p10-p90 (partly unrecorded)";
  if (!separate) {
    out.reason = fmt::format("{}, beyond the {} threshold but within noise: the {} intervals overlap", change, pct, spread);
    return out;
  }
  out.verdict = slower ? Verdict::regression : Verdict::improvement;
  out.reason = fmt::format("{}, beyond the {} threshold and the {} intervals are disjoint", change, pct, spread);
  return out;
}

VerdictCounts Comparison::counts() const {
  VerdictCounts n;
  for (Verdict v : kAllVerdicts) n[v] = 0;
  for (const KeyResult& k : keys) ++n[k.verdict];
  return n;
}

bool Comparison::fails(std::span<const Verdict> fail_on) const {
  return std::any_of(keys.begin(), keys.end(), [&](const KeyResult& k) {
    return std::find(fail_on.begin(), fail_on.end(), k.verdict) != fail_on.end();
  });
}

namespace {

std::string join(const std::vector<std::string>& items, std::string_view sep = "; ") {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : std::string(sep)) + s;
  return out;
}

std::set<std::string> labels_of(const detail::KeyedWinners& w) {
  std::set<std::string> out;
  for (const auto& [key, row] : w.rows) out.insert(key.device);
  return out;
}

void relabel(detail::KeyedWinners& w, const std::string& device) {
  std::map<Key, WinnerRow> rows;
  for (auto& [key, row] : w.rows) {
    Key k = key;
    k.device = device;
    rows.emplace(std::move(k), std::move(row));
  }
  w.rows = std::move(rows);
}

// Describes each device label's rows, to see driver or runtime changes.
std::map<std::string, std::set<std::string>> descriptions_by_label(const detail::KeyedWinners& w) {
  std::map<std::string, std::set<std::string>> out;
  for (const auto& [key, row] : w.rows) out[key.device].insert(detail::device_description(row.device));
  return out;
}

std::vector<std::string> device_notices(const detail::KeyedWinners& b, const detail::KeyedWinners& c) {
  std::vector<std::string> notices;
  auto bd = descriptions_by_label(b), cd = descriptions_by_label(c);
  for (const auto& [label, descs] : bd) {
    auto it = cd.find(label);
    if (it == cd.end())
      notices.push_back(fmt::format("device {} has winners only in the baseline; its keys are reported missing", label));
    else if (descs != it->second)
      notices.push_back(fmt::format("device software differs: baseline {}; current {}",
                                    join({descs.begin(), descs.end()}, ", "),
                                    join({it->second.begin(), it->second.end()}, ", ")));
  }
  for (const auto& [label, descs] : cd)
    if (!bd.contains(label))
      notices.push_back(fmt::format("device {} has winners only in the current database; its keys are reported new", label));
  return notices;
}

}  // namespace

Result<Comparison> compare(Store& baseline, Store& current, const CompareOptions& opt) {
  detail::KeyedWinners b = FT_TRY(detail::keyed_winners(baseline));
  detail::KeyedWinners c = FT_TRY(detail::keyed_winners(current));
  Comparison out;
  out.threshold = opt.threshold;
  out.baseline = detail::source_info(baseline, b);
  out.current = detail::source_info(current, c);

  if (b.rows.empty()) out.notices.push_back("the baseline database has no winners (a --dry-run search records none)");
  if (c.rows.empty()) out.notices.push_back("the current database has no winners (a --dry-run search records none)");

  // One GPU on each side but not the same one: compare them with each other.
  const auto b_labels = labels_of(b), c_labels = labels_of(c);
  std::string current_label_of_pair;
  if (b_labels.size() == 1 && c_labels.size() == 1 && b_labels != c_labels) {
    out.notices.push_back(fmt::format("different devices: baseline {}, current {}; their winners are compared with each other",
                                      join(out.baseline.devices, ", "), join(out.current.devices, ", ")));
    current_label_of_pair = *c_labels.begin();
    const std::string pair = fmt::format("{} vs {}", *b_labels.begin(), *c_labels.begin());
    relabel(b, pair);
    relabel(c, pair);
  } else {
    for (auto& n : device_notices(b, c)) out.notices.push_back(std::move(n));
  }
  if (out.baseline.toolchains != out.current.toolchains && !b.rows.empty() && !c.rows.empty())
    out.notices.push_back(fmt::format("different toolchains: baseline {}; current {}", join(out.baseline.toolchains, ", "),
                                      join(out.current.toolchains, ", ")));
  if (b.several_per_key)
    out.notices.push_back("the baseline holds several winners per key (several driver versions); the newest is used");
  if (c.several_per_key)
    out.notices.push_back("the current database holds several winners per key (several driver versions); the newest is used");

  // The current database's ids, to look up what fails there.
  std::map<std::string, ProblemRecord> current_problems;
  for (ProblemRecord& p : FT_TRY(current.problems())) current_problems.emplace(p.key, std::move(p));
  std::map<std::string, std::vector<DeviceRecord>> current_devices;  // by label
  for (DeviceRecord& d : FT_TRY(current.devices())) current_devices[device_label(d)].push_back(std::move(d));
  detail::FailureFinder finder(current);

  std::set<Key> keys;
  for (const auto& [k, row] : b.rows) keys.insert(k);
  for (const auto& [k, row] : c.rows) keys.insert(k);
  for (const Key& key : keys) {
    KeyResult r;
    r.key = key;
    const WinnerRow* brow = nullptr;
    const WinnerRow* crow = nullptr;
    if (auto it = b.rows.find(key); it != b.rows.end()) brow = &it->second, r.baseline = detail::winner_of(*brow);
    if (auto it = c.rows.find(key); it != c.rows.end()) crow = &it->second, r.current = detail::winner_of(*crow);

    // Kernels whose failure now breaks this key: both winners and a layer's stages.
    std::vector<std::string> kernels;
    auto add_kernels = [&](const WinnerRow* row) {
      if (!row) return;
      std::vector<std::string> names{row->variant.kernel_name};
      for (auto& s : detail::stage_kernels(row->variant)) names.push_back(std::move(s));
      for (auto& n : names)
        if (std::find(kernels.begin(), kernels.end(), n) == kernels.end()) kernels.push_back(std::move(n));
    };
    add_kernels(brow);
    add_kernels(crow);
    // Compile errors count wherever the target matches (a --dry-run current
    // database has no GPU device); measurements only on the key's device.
    auto problem = current_problems.find(key.problem);
    auto devices = current_devices.find(current_label_of_pair.empty() ? key.device : current_label_of_pair);
    std::vector<std::int64_t> device_ids;
    std::string target = crow ? crow->device.arch : brow->device.arch;
    if (devices != current_devices.end()) {
      for (const DeviceRecord& d : devices->second) device_ids.push_back(d.id);
      target = devices->second.front().arch;
    }
    const std::optional<std::int64_t> problem_id =
        problem != current_problems.end() ? std::optional<std::int64_t>(problem->second.id) : std::nullopt;
    for (const std::string& k : kernels)
      for (KernelFailure& f : FT_TRY(finder.failures(k, target, problem_id, device_ids, key.tokens)))
        r.failures.push_back(std::move(f));

    if (brow && crow) r.ratio = r.current->timing.median_us / r.baseline->timing.median_us;
    if (!r.failures.empty()) {
      const KernelFailure& f = r.failures.front();
      r.verdict = Verdict::broken;
      r.reason = fmt::format("{} {} now fails ({}){}", brow && f.kernel_name == brow->variant.kernel_name ? "the baseline winner"
                                               : crow && f.kernel_name == crow->variant.kernel_name ? "the current winner"
                                                                                                      : "stage kernel",
                             f.kernel_name, f.status,
                             f.message.empty() ? std::string() : ": " + first_line(f.message));
    } else if (brow && crow) {
      TimingVerdict tv = judge_timing(r.baseline->timing, r.current->timing, opt.threshold);
      r.verdict = tv.verdict;
      r.reason = std::move(tv.reason);
    } else if (brow) {
      r.verdict = Verdict::missing;
      r.reason = "no winner in the current database";
    } else {
      r.verdict = Verdict::new_key;
      r.reason = "no winner in the baseline database";
    }
    if (opt.floor) {
      const WinnerRow& row = crow ? *crow : *brow;
      r.floor_us = opt.floor(row.problem, row.device, key.tokens, key.kind);
    }
    out.keys.push_back(std::move(r));
  }
  std::stable_sort(out.keys.begin(), out.keys.end(), [](const KeyResult& x, const KeyResult& y) {
    return std::tie(x.key.problem, x.key.device, x.key.kind, x.key.tokens) <
           std::tie(y.key.problem, y.key.device, y.key.kind, y.key.tokens);
  });
  return out;
}

}  // namespace ft::db::report
