#pragma once
// CI regression reports over flytune databases (docs/REPORT.md).
//
// compare(): the winners of a baseline and a current database, key by key
// (problem, device, token bucket, kind), each with a noise-aware verdict.
// summarize(): one database's winners, roofline fractions and failures.
// Both only read: pass stores opened with OpenMode::read_only.
//
// The roofline floor is a caller-supplied function (FloorFn) so this library
// does not depend on the tuner's ceilings; cli/cmd_report.cpp supplies it.
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "base/error.hpp"

namespace ft::db::report {

// In order of severity; reports list keys in this order.
enum class Verdict { broken, regression, missing, new_key, improvement, unchanged };
inline constexpr std::array kAllVerdicts{Verdict::broken,  Verdict::regression,  Verdict::missing,
                                         Verdict::new_key, Verdict::improvement, Verdict::unchanged};

std::string_view to_string(Verdict v);  // "broken", "regression", "missing", "new", "improvement", "unchanged"
Result<Verdict> parse_verdict(std::string_view s);
// "regression,broken", "none" (an empty set), or any list of verdict names.
Result<std::vector<Verdict>> parse_verdict_list(std::string_view s);
// "5%" (percent) or "0.05" (a fraction below 1); 0 is allowed.
Result<double> parse_threshold(std::string_view s);

// A winner's time: the median and, where recorded, the p10-p90 spread.
struct Timing {
  double median_us = 0;
  std::optional<double> p10_us, p90_us;

  bool has_spread() const { return p10_us.has_value() && p90_us.has_value(); }
  // The interval the noise rule compares: [p10, p90] widened to contain the
  // median (the search may record the median of later A/B rounds beside the
  // spread of an earlier measurement); just the median without a spread.
  double low() const;
  double high() const;
};

// The noise rule (docs/REPORT.md): with b, c the baseline and current medians
// and t the threshold, a change counts only if
//   slower: c > b * (1 + t)  and  low(current) > high(baseline)
//   faster: c < b * (1 - t)  and  high(current) < low(baseline)
// Otherwise the verdict is unchanged. `reason` says which test decided.
struct TimingVerdict {
  Verdict verdict = Verdict::unchanged;
  double ratio = 1;  // c / b
  std::string reason;
};
TimingVerdict judge_timing(const Timing& baseline, const Timing& current, double threshold);

// What a report is keyed by. `device` is "name (arch)", so a driver or runtime
// upgrade of the same GPU compares with the old results (and is noted).
struct Key {
  std::string problem;
  std::string device;
  int tokens = 0;
  std::string kind;  // "moe1", "moe2", "layer", ...
  auto operator<=>(const Key&) const = default;
};

// One database's winner of a key.
struct Winner {
  std::string kernel_name;
  Timing timing;
  std::string toolchain;  // "nvrtc 13.0"
  std::string device;     // "NVIDIA H200 (sm_90a), cuda driver 580.95.05, runtime 13.0"
  std::optional<double> speedup_vs_default;
  std::int64_t run_id = 0;
  std::string chosen_at;
};

// A kernel that fails in a database: its compile status, or its latest
// measurement of the problem and device.
struct KernelFailure {
  std::string kernel_name;
  std::string status;         // "compile_error", "verify_failed", "launch_error", "timeout"
  std::optional<int> tokens;  // measurement failures: the token count measured
  std::string phase;          // measurement failures: "verify", "short", "layer", ...
  std::string message;        // the compiler log or error message, whole
};

struct KeyResult {
  Key key;
  std::optional<Winner> baseline, current;
  std::optional<double> ratio;  // current / baseline median, where both exist
  Verdict verdict = Verdict::unchanged;
  std::string reason;                   // one line: why this verdict
  std::vector<KernelFailure> failures;  // broken: what fails now
  std::optional<double> floor_us;       // roofline floor, where known
};

// What a database holds, for the report's header.
struct SourceInfo {
  std::string path;
  std::vector<std::string> devices;     // devices that have winners, described in full
  std::vector<std::string> toolchains;  // toolchains of the winners' variants
  std::vector<std::string> builds;      // flytune version (commit) of the runs that chose winners
  std::size_t winners = 0;
};

using VerdictCounts = std::map<Verdict, int>;

struct Comparison {
  SourceInfo baseline, current;
  double threshold = 0.05;
  std::vector<std::string> notices;  // different devices, toolchains, empty databases
  std::vector<KeyResult> keys;       // sorted by problem, device, kind, tokens

  VerdictCounts counts() const;
  // True when any key's verdict is in `fail_on`.
  bool fails(std::span<const Verdict> fail_on) const;
};

// The roofline floor of a key in microseconds, or nullopt where unknown.
using FloorFn = std::function<std::optional<double>(const ProblemRecord&, const DeviceRecord&, int tokens,
                                                    std::string_view kind)>;

struct CompareOptions {
  double threshold = 0.05;
  FloorFn floor;  // may be empty
};

Result<Comparison> compare(Store& baseline, Store& current, const CompareOptions& options);

// ---- One database --------------------------------------------------------------

struct SummaryRow {
  Key key;
  Winner winner;
  std::optional<double> floor_us;
  std::optional<double> floor_fraction;  // floor / median: 1 is at the roofline
};

struct FailedKernel {
  std::string kernel_name;
  std::string target;
  std::string kind;
  std::string status;
  std::string problem;        // empty for compile errors
  std::string device;         // empty for compile errors
  std::optional<int> tokens;  // empty for compile errors
  std::string message;
};

struct Summary {
  SourceInfo source;
  std::vector<std::string> notices;
  std::vector<SummaryRow> winners;                         // sorted by problem, device, kind, tokens
  std::map<std::string, std::int64_t> compile_counts;      // compile_status -> variants
  std::map<std::string, std::int64_t> measurement_counts;  // status -> latest measurement of each key
  std::vector<FailedKernel> failures;                      // compile errors, then failed latest measurements
};

struct SummaryOptions {
  FloorFn floor;
};

Result<Summary> summarize(Store& store, const SummaryOptions& options);

// ---- Output ----------------------------------------------------------------------

enum class Format { markdown, junit, json, html };
Result<Format> parse_format(std::string_view s);  // "md" (or "markdown"), "junit", "json", "html"

// `fail_on` marks which verdicts are failures (JUnit <failure>, the summary line).
std::string to_markdown(const Comparison& c, std::span<const Verdict> fail_on);
std::string to_junit(const Comparison& c, std::span<const Verdict> fail_on);
nlohmann::json to_json(const Comparison& c, std::span<const Verdict> fail_on);
std::string to_html(const Comparison& c, std::span<const Verdict> fail_on);
// One line: "2 regressions, 1 broken, ... (threshold 5%)".
std::string summary_line(const Comparison& c);

std::string to_markdown(const Summary& s);
std::string to_junit(const Summary& s);  // a test case per winner (passed) and per failed kernel (failure)
nlohmann::json to_json(const Summary& s);
std::string to_html(const Summary& s);
std::string summary_line(const Summary& s);

// Renders in `format`; JSON is pretty-printed, with invalid UTF-8 replaced.
std::string render(const Comparison& c, Format format, std::span<const Verdict> fail_on);
std::string render(const Summary& s, Format format);

}  // namespace ft::db::report
