#pragma once
// The one writer of a search's results: a Recorder owns the search's store
// connection, and every store write of a search -- its run, problem, devices,
// toolchains, code objects, variants, measurements, winners -- and every
// update of the summary goes through it. It serialises them, so the search's
// threads (one per device) share one connection in one process. Nothing
// else in tuner/search touches the store.
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "store/store.hpp"
#include "search/search.hpp"

namespace ft {

class Recorder {
 public:
  Recorder(db::Store store, SearchSummary& summary) : store_(std::move(store)), summary_(summary) {}
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  // Runs the store's open found left 'running' by processes that are gone (now marked interrupted).
  std::vector<db::StaleRun> stale_runs();
  Result<std::int64_t> begin_run(const db::RunRecord& run);
  Status end_run(std::int64_t run_id, db::RunStatus status);

  Result<std::int64_t> problem(const db::ProblemRecord& p);
  Result<std::int64_t> device(const db::DeviceRecord& d);
  Result<std::int64_t> toolchain(const db::ToolchainRecord& t);
  Status code_object(std::string_view hash, std::string_view format, std::span<const std::byte> bytes);
  Result<std::int64_t> variant(const db::VariantRecord& v);

  // Adds the row and counts it in the summary.
  Status measurement(const db::MeasurementRecord& m);
  // The latest measurement of a (variant, problem, device, tokens).
  Result<std::optional<db::MeasurementRecord>> latest(const db::MeasurementKey& key);
  // The measurements a filter selects (strategies' earlier measurements).
  Result<std::vector<db::MeasurementRecord>> measurements(const db::MeasurementFilter& filter);
  // Counts a measurement taken from the store instead of measured again.
  void resumed();
  // A winner row and its line in the summary.
  Status winner(const db::WinnerRecord& w, BucketResult line);
  void note(std::string text);
  // A bucket that ended without a layer winner: its note, and its entry in
  // the summary's missing layers.
  void missing_layer(MissingLayer missing);
  // Runs `body` with the store, between the writes (the cost model reads the timings so far).
  Status read(const std::function<Status(db::Store&)>& body);

 private:
  std::mutex mu_;
  db::Store store_;
  SearchSummary& summary_;
};

}  // namespace ft
