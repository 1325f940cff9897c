#pragma once
// The one writer of a search's results: every store write of the GPU search
// (variants of layer pairs, measurements, winners) and every update of the
// summary goes through a Recorder, which serialises them, so the search's
// threads (one per GPU) share one database connection in one process.
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "db/store.hpp"
#include "tuner/search/search.hpp"

namespace ft {

class Recorder {
 public:
  Recorder(db::Store& store, SearchSummary& summary) : store_(store), summary_(summary) {}

  Result<std::int64_t> variant(const db::VariantRecord& v);
  // Adds the row and counts it in the summary.
  Status measurement(const db::MeasurementRecord& m);
  // The latest measurement of a (variant, problem, device, tokens); counts a
  // resume in the summary when `resumed` says the caller will use it.
  Result<std::optional<db::MeasurementRecord>> latest(const db::MeasurementKey& key);
  void resumed();
  // A winner row and its line in the summary.
  Status winner(const db::WinnerRecord& w, BucketResult line);
  void note(std::string text);
  // Runs `body` with the store, between the writes (the cost model reads the timings so far).
  Status read(const std::function<Status(db::Store&)>& body);

 private:
  std::mutex mu_;
  db::Store& store_;
  SearchSummary& summary_;
};

}  // namespace ft
