#include "report/collect.hpp"

#include <algorithm>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "store/kind.hpp"
#include "store/layer_record.hpp"

namespace ft::db::report::detail {

std::string device_label(const DeviceRecord& d) { return fmt::format("{} ({})", d.name, d.arch); }

std::string device_description(const DeviceRecord& d) {
  std::string text = device_label(d);
  if (d.runtime == "none") return text + ", compile only";
  text += ", " + d.runtime;
  if (!d.driver_version.empty()) text += " driver " + d.driver_version;
  if (!d.runtime_version.empty()) text += ", runtime " + d.runtime_version;
  return text;
}

std::string toolchain_label(const ToolchainRecord& t) { return t.label(); }

Winner winner_of(const WinnerRow& row) {
  Winner w;
  w.kernel_name = row.variant.kernel_name;
  w.timing = {row.winner.median_us, row.winner.p10_us, row.winner.p90_us};
  w.toolchain = toolchain_label(row.toolchain);
  w.device = device_description(row.device);
  w.speedup_vs_default = row.winner.speedup_vs_default;
  w.run_id = row.winner.run_id;
  w.chosen_at = row.winner.chosen_at;
  return w;
}

Result<KeyedWinners> keyed_winners(Store& store) {
  KeyedWinners out;
  for (WinnerRow& row : FT_TRY(store.winners())) {
    ++out.total;
    Key key{row.problem.key, device_label(row.device), row.winner.tokens, row.winner.kind};
    auto it = out.rows.find(key);
    if (it == out.rows.end()) {
      out.rows.emplace(std::move(key), std::move(row));
      continue;
    }
    out.several_per_key = true;
    const auto newer = [](const WinnerRow& a, const WinnerRow& b) {
      return std::tie(a.winner.chosen_at, a.winner.run_id, a.device.id) > std::tie(b.winner.chosen_at, b.winner.run_id, b.device.id);
    };
    if (newer(row, it->second)) it->second = std::move(row);
  }
  return out;
}

SourceInfo source_info(Store& store, const KeyedWinners& winners) {
  SourceInfo info;
  info.path = store.path();
  info.winners = winners.rows.size();
  std::set<std::string> devices, toolchains;
  std::set<std::int64_t> run_ids;
  for (const auto& [key, row] : winners.rows) {
    devices.insert(device_description(row.device));
    toolchains.insert(toolchain_label(row.toolchain));
    run_ids.insert(row.winner.run_id);
  }
  info.devices.assign(devices.begin(), devices.end());
  info.toolchains.assign(toolchains.begin(), toolchains.end());
  // The builds are context only: a database whose runs cannot be listed still reports.
  if (auto runs = store.list_runs()) {
    std::set<std::string> builds;
    for (const RunRecord& r : *runs)
      if (run_ids.contains(r.id))
        builds.insert(r.git_commit.empty() ? r.flytune_version : fmt::format("{} ({})", r.flytune_version, r.git_commit));
    info.builds.assign(builds.begin(), builds.end());
  }
  return info;
}

bool is_failure(MeasurementStatus s) { return s != MeasurementStatus::ok && s != MeasurementStatus::skipped; }

std::vector<std::string> stage_kernels(const VariantRecord& v) {
  std::vector<std::string> out;
  if (!is(v.kind, Kind::layer)) return out;
  if (auto record = LayerRecord::from_params(v.params)) out = {record->stage1_kernel, record->stage2_kernel};
  return out;
}

Result<std::optional<VariantRecord>> FailureFinder::newest_variant(const std::string& kernel_name,
                                                                   const std::string& target) {
  auto key = std::make_pair(kernel_name, target);
  if (auto it = variants_.find(key); it != variants_.end()) return it->second;
  VariantFilter filter;
  filter.kernel_name = kernel_name;
  filter.target = target;
  auto rows = FT_TRY(store_.variants(filter));
  std::optional<VariantRecord> newest;
  // One row per toolchain; the most recently compiled one is what the database says now.
  for (VariantRecord& v : rows)
    if (!newest || std::tie(v.updated_at, v.id) > std::tie(newest->updated_at, newest->id)) newest = std::move(v);
  variants_.emplace(key, newest);
  return newest;
}

Result<std::vector<KernelFailure>> FailureFinder::failures(const std::string& kernel_name, const std::string& target,
                                                           std::optional<std::int64_t> problem_id,
                                                           const std::vector<std::int64_t>& device_ids, int tokens) {
  std::vector<KernelFailure> out;
  auto variant = FT_TRY(newest_variant(kernel_name, target));
  if (!variant) return out;
  if (variant->compile_status == CompileStatus::compile_error) {
    out.push_back({kernel_name, std::string(to_string(CompileStatus::compile_error)), std::nullopt, "compile",
                   variant->compile_log});
    return out;
  }
  if (!problem_id) return out;
  for (std::int64_t device_id : device_ids) {
    MeasurementFilter filter;
    filter.variant_id = variant->id;
    filter.problem_id = problem_id;
    filter.device_id = device_id;
    filter.latest_only = true;
    for (const MeasurementRecord& m : FT_TRY(store_.measurements(filter)))
      if (is_failure(m.status) && (m.tokens == tokens || m.phase == "verify"))
        out.push_back({kernel_name, std::string(to_string(m.status)), m.tokens, m.phase, m.error_message});
  }
  return out;
}

}  // namespace ft::db::report::detail
