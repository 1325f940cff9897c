// One database: winners with their roofline fraction, and what failed.
#include <algorithm>
#include <tuple>

#include "report/collect.hpp"
#include "report/report.hpp"

namespace ft::db::report {

Result<Summary> summarize(Store& store, const SummaryOptions& opt) {
  detail::KeyedWinners keyed = FT_TRY(detail::keyed_winners(store));
  Summary s;
  s.source = detail::source_info(store, keyed);
  if (keyed.rows.empty()) s.notices.push_back("no winners recorded (a --dry-run search records none)");
  if (keyed.several_per_key)
    s.notices.push_back("several winners per key (several driver versions of one GPU); the newest is shown");

  for (const auto& [key, row] : keyed.rows) {
    SummaryRow r{key, detail::winner_of(row), std::nullopt, std::nullopt};
    if (opt.floor) r.floor_us = opt.floor(row.problem, row.device, key.tokens, key.kind);
    if (r.floor_us && row.winner.median_us > 0) r.floor_fraction = *r.floor_us / row.winner.median_us;
    s.winners.push_back(std::move(r));
  }
  std::stable_sort(s.winners.begin(), s.winners.end(), [](const SummaryRow& x, const SummaryRow& y) {
    return std::tie(x.key.problem, x.key.device, x.key.kind, x.key.tokens) <
           std::tie(y.key.problem, y.key.device, y.key.kind, y.key.tokens);
  });

  for (const VariantCount& c : FT_TRY(store.variant_counts())) s.compile_counts[c.status] += c.count;

  std::map<std::int64_t, VariantRecord> variants;
  for (VariantRecord& v : FT_TRY(store.variants())) variants.emplace(v.id, std::move(v));
  std::map<std::int64_t, std::string> problems, devices;
  for (const ProblemRecord& p : FT_TRY(store.problems())) problems.emplace(p.id, p.key);
  for (const DeviceRecord& d : FT_TRY(store.devices())) devices.emplace(d.id, detail::device_label(d));

  for (const auto& [id, v] : variants)
    if (v.compile_status == CompileStatus::compile_error)
      s.failures.push_back({v.kernel_name, v.target, v.kind, "compile_error", {}, {}, std::nullopt, v.compile_log});

  MeasurementFilter latest;
  latest.latest_only = true;
  std::vector<FailedKernel> measured;
  for (const MeasurementRecord& m : FT_TRY(store.measurements(latest))) {
    ++s.measurement_counts[std::string(to_string(m.status))];
    if (!detail::is_failure(m.status)) continue;
    auto v = variants.find(m.variant_id);
    // A compile error already listed above needs no second line per measurement.
    if (v != variants.end() && v->second.compile_status == CompileStatus::compile_error &&
        m.status == MeasurementStatus::compile_error)
      continue;
    FailedKernel f;
    f.kernel_name = v != variants.end() ? v->second.kernel_name : "variant " + std::to_string(m.variant_id);
    f.target = v != variants.end() ? v->second.target : "";
    f.kind = v != variants.end() ? v->second.kind : "";
    f.status = std::string(to_string(m.status));
    f.problem = problems.contains(m.problem_id) ? problems[m.problem_id] : std::to_string(m.problem_id);
    f.device = devices.contains(m.device_id) ? devices[m.device_id] : std::to_string(m.device_id);
    f.tokens = m.tokens;
    f.message = m.error_message;
    measured.push_back(std::move(f));
  }
  std::stable_sort(measured.begin(), measured.end(), [](const FailedKernel& a, const FailedKernel& b) {
    return std::tie(a.problem, a.device, a.kernel_name, a.tokens) < std::tie(b.problem, b.device, b.kernel_name, b.tokens);
  });
  for (auto& f : measured) s.failures.push_back(std::move(f));
  return s;
}

}  // namespace ft::db::report
