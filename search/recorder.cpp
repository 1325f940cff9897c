#include "search/recorder.hpp"

#include <fmt/format.h>

namespace ft {

std::vector<db::StaleRun> Recorder::stale_runs() {
  std::lock_guard lock(mu_);
  return store_.stale_runs();
}

Result<std::int64_t> Recorder::begin_run(const db::RunRecord& run) {
  std::lock_guard lock(mu_);
  return store_.begin_run(run);
}

Status Recorder::end_run(std::int64_t run_id, db::RunStatus status) {
  std::lock_guard lock(mu_);
  return store_.end_run(run_id, status);
}

Result<std::int64_t> Recorder::problem(const db::ProblemRecord& p) {
  std::lock_guard lock(mu_);
  return store_.upsert_problem(p);
}

Result<std::int64_t> Recorder::device(const db::DeviceRecord& d) {
  std::lock_guard lock(mu_);
  return store_.upsert_device(d);
}

Result<std::int64_t> Recorder::toolchain(const db::ToolchainRecord& t) {
  std::lock_guard lock(mu_);
  return store_.upsert_toolchain(t);
}

Status Recorder::code_object(std::string_view hash, std::string_view format, std::span<const std::byte> bytes) {
  std::lock_guard lock(mu_);
  return store_.put_code_object(hash, format, bytes);
}

Result<std::int64_t> Recorder::variant(const db::VariantRecord& v) {
  std::lock_guard lock(mu_);
  return store_.upsert_variant(v);
}

Status Recorder::measurement(const db::MeasurementRecord& m) {
  std::lock_guard lock(mu_);
  (void)FT_TRY(store_.add_measurement(m));
  ++summary_.measurements;
  return {};
}

Result<std::optional<db::MeasurementRecord>> Recorder::latest(const db::MeasurementKey& key) {
  std::lock_guard lock(mu_);
  return store_.latest_measurement(key);
}

Result<std::vector<db::MeasurementRecord>> Recorder::measurements(const db::MeasurementFilter& filter) {
  std::lock_guard lock(mu_);
  return store_.measurements(filter);
}

void Recorder::resumed() {
  std::lock_guard lock(mu_);
  ++summary_.resumed;
}

Status Recorder::winner(const db::WinnerRecord& w, BucketResult line) {
  std::lock_guard lock(mu_);
  FT_CHECK(store_.set_winner(w));
  summary_.winners.push_back(std::move(line));
  return {};
}

void Recorder::note(std::string text) {
  std::lock_guard lock(mu_);
  summary_.notes.push_back(std::move(text));
}

void Recorder::missing_layer(MissingLayer missing) {
  std::lock_guard lock(mu_);
  summary_.notes.push_back(fmt::format("T={}: no layer winner: {}", missing.tokens, missing.reason));
  summary_.missing_layers.push_back(std::move(missing));
}

Status Recorder::read(const std::function<Status(db::Store&)>& body) {
  std::lock_guard lock(mu_);
  return body(store_);
}

}  // namespace ft
