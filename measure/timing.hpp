#pragma once
// Event timing on a Device, as every bench of measure/ times: a repetition's
// time from its two events (refused when it is no time), the L2 flush before
// each repetition, the warm-ups and repetitions around a run, and their
// summary (median, p10, p90, min). LayerBench times stages and layers with
// these, BackwardBench the backward program.
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "device/device.hpp"
#include "device/device_buffer.hpp"

namespace ft {

struct Timing {
  double median_us = 0, p10_us = 0, p90_us = 0, min_us = 0;
  int samples = 0;
};
Timing summarize(std::vector<double> samples_us);

// An operation's program timed as a whole, with the parts of it its bench
// times alone, by name: the forward layer's align (with the clears), stage1,
// stage2 and reduce; the backward's support (align and clears) and each GEMM
// role (dgrad2, dgrad1, wgrad2, wgrad1), from events between its steps.
struct ProgramTiming {
  Timing total;
  std::vector<std::pair<std::string, Timing>> parts;
  const Timing* part(std::string_view name) const;  // null: not timed alone
};

struct TimingOptions {
  int warmup = 3;
  int reps = 20;
  bool flush_l2 = true;  // overwrite a buffer twice the L2 size before each rep
  bool graph = false;    // replay a captured graph instead of direct launches (layer only)
};

// One repetition's time from its two events, in microseconds: refused
// (Errc::device) when the runtime gives a time that is no time (NaN, infinite
// or negative: a runtime bug, or events read out of order), which would
// otherwise be sorted into the median as if measured.
Result<double> sample_us(Device& dev, EventHandle start, EventHandle stop);

// A buffer twice the device's L2 (at least 64 MiB), rewritten before a
// repetition so it evicts every line the last one touched.
class L2Flush {
 public:
  static Result<L2Flush> create(Device& dev);
  L2Flush() = default;
  Status operator()(Device& dev, StreamHandle s = {}) const;

 private:
  DeviceBuffer buffer_;
};

// opt.warmup + opt.reps runs of `run` on the default stream, each after the L2
// flush (when opt.flush_l2; `flush` then must be given) and between two
// events, waited for; the repetitions after the warm-ups summarised.
Result<Timing> time_runs(Device& dev, const TimingOptions& opt, const L2Flush* flush, const std::function<Status()>& run);

// As time_runs, with `marks` (at least 2) events that `run` records itself:
// the first before its work, the last after it, the others between its steps
// (layer/execute.hpp's ExecuteOptions::marks). The whole is first to last;
// each interval's samples (between marks i and i + 1) are kept per repetition
// after the warm-ups, for a caller that adds some of them up.
struct MarkedTiming {
  Timing total;
  std::vector<std::vector<double>> intervals;  // [marks - 1][repetitions] microseconds
};
// The flush and the wait are on `stream` (the default stream if none).
Result<MarkedTiming> time_marked_runs(Device& dev, const TimingOptions& opt, const L2Flush* flush, std::size_t marks,
                                      const std::function<Status(std::span<const EventHandle>)>& run,
                                      StreamHandle stream = {});

}  // namespace ft
