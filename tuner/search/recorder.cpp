#include "tuner/search/recorder.hpp"

namespace ft {

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

Status Recorder::read(const std::function<Status(db::Store&)>& body) {
  std::lock_guard lock(mu_);
  return body(store_);
}

}  // namespace ft
