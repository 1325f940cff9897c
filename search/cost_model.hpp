#pragma once
// The cost model of stage kernels: a prediction of how long one variant takes
// on one problem, device model and token count before it is timed, from what
// the database already says -- the variant's JSON parameters, its compile
// resources, the problem, the token count, the launch the layer program makes
// of it, and earlier timings (of this run's earlier buckets and of earlier
// runs on the same device model, any problem).
//
// The model (docs/TUNER.md, "The cost model"): ridge regression of log time
// on generic features (every numeric or boolean parameter a number, every
// string parameter one-hot, so a new kernel family needs no change here),
// with the variant's features also multiplied by log T; plus, for a variant
// timed before, its own residual carried over from the token counts (and,
// weaker, the problems) where it was timed. One model per kind and device
// model; its ridge penalty chosen by leave-one-bucket-out cross-validation,
// which also says how far its ranking can be trusted.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "store/store.hpp"
#include "base/error.hpp"

namespace ft::model {

// A point the model predicts, keyed like a measurement: variant, problem,
// device row, tokens.
struct Point {
  std::int64_t variant_id = 0;
  std::int64_t problem_id = 0;
  std::int64_t device_id = 0;
  int tokens = 0;
  auto operator<=>(const Point&) const = default;
  static Point of(const db::MeasurementKey& k) { return {k.variant_id, k.problem_id, k.device_id, k.tokens}; }
};

// One stage timing: the best measurement of a point.
struct Sample {
  Point at;
  double time_us = 0;
  std::int64_t run_id = 0;
};

// A bucket of one device model: a problem and a token count.
struct Bucket {
  std::int64_t problem_id = 0;
  int tokens = 0;
  auto operator<=>(const Bucket&) const = default;
};
inline Bucket bucket_of(const Point& p) { return {p.problem_id, p.tokens}; }

// The rows the model reads, by id, and the timings of one kind on one device
// model. A dataset holds every variant of its kind (timed or not), so points
// of candidates not yet timed can be predicted from it.
struct Dataset {
  std::string kind;                     // "moe1", "moe2", ...
  std::string device_name, arch;        // the device model
  std::map<std::int64_t, db::VariantRecord> variants;
  std::map<std::int64_t, db::ProblemRecord> problems;
  std::map<std::int64_t, db::DeviceRecord> devices;
  std::vector<Sample> samples;          // one per point, ordered by point
  // features_of each sample (compute_features), for fitting many models on
  // one dataset; a fit computes them itself when this does not match `samples`.
  std::vector<std::map<std::string, double>> features;
};

// The timings of `kind` on every device row of `device`'s model (same name and
// architecture), any problem and run: per point the measurement of the stage
// ranking's phases (ab, long, short: the first that exists) with status ok,
// the newest among equals. `exclude`: a bucket left out (the one a search is
// about to rank).
Result<Dataset> load_dataset(db::Store& store, std::string_view kind, const db::DeviceRecord& device,
                             std::optional<Bucket> exclude = std::nullopt);

// The timing phases of the stage ranking, best first (ab rounds, long, short).
std::span<const std::string_view> timing_phases();

// The generic features of a point, by name (for tests and explanations):
// "param.<path>" (numbers as sign(x)·log2(1+|x|), booleans 0/1),
// "param.<path>=<value>" (strings, one-hot), "res.<name>" (compile
// resources, log2(1+x)), "has.<name>" (1 where the value exists), "launch.*"
// (from the layer program, log2 unless said: blocks, threads, waves over the
// device's SMs at the analysed occupancy and the last wave's fill, padded rows
// per routed row, the share of the grid that has rows (a fraction), the
// weight bytes read counting each row block's own read), "bucket.*" (log2 of
// tokens, experts, hidden, inter, top-k, the experts a
// uniform routing reaches, the stage's FLOPs and the weight bytes it needs;
// the problem's dtype, activation and routing one-hot).
std::map<std::string, double> features_of(const Dataset& d, const Point& p);
// Fills d.features for d.samples.
void compute_features(Dataset& d);

struct ModelOptions {
  bool features = true;   // the variant's features in the regression (off: only the bucket's)
  bool transfer = true;   // the variant's residuals carried over from its other points
};

// How a fit went, and how far it can be trusted.
struct FitReport {
  std::size_t samples = 0, buckets = 0, features = 0;
  double lambda = 0;
  // Leave-one-bucket-out over (at most 12 of) the training buckets: the mean
  // rank correlation (Spearman) of predicted and measured times inside a
  // bucket, and how many buckets it was computed on (0: fewer than two).
  double cv_spearman = 0;
  std::size_t cv_buckets = 0;
};

class CostModel {
 public:
  // Fits on the samples of `d` at `train` (indices into d.samples; all when
  // empty). Errc::invalid_input when there is nothing to fit on.
  static Result<CostModel> fit(const Dataset& d, std::span<const std::size_t> train = {}, const ModelOptions& opt = {});

  // The predicted median time (microseconds) of a point of `d` (which may be
  // a dataset other than the one fitted on, holding the same rows).
  double predict_us(const Dataset& d, const Point& p) const;
  const FitReport& report() const { return report_; }

  struct Impl;
  CostModel(CostModel&&) noexcept;
  CostModel& operator=(CostModel&&) noexcept;
  ~CostModel();

 private:
  explicit CostModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  FitReport report_;
};

// Spearman rank correlation of two equally long series (0 for fewer than two
// values or a constant series).
double spearman(std::span<const double> a, std::span<const double> b);

}  // namespace ft::model
