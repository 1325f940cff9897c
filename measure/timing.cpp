#include "measure/timing.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace ft {
namespace {

double percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * double(sorted.size() - 1);
  const std::size_t lo = std::size_t(std::floor(pos)), hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - double(lo));
}

}  // namespace

Timing summarize(std::vector<double> us) {
  Timing t;
  if (us.empty()) return t;
  std::sort(us.begin(), us.end());
  t.samples = int(us.size());
  t.min_us = us.front();
  t.median_us = percentile(us, 0.5);
  t.p10_us = percentile(us, 0.1);
  t.p90_us = percentile(us, 0.9);
  return t;
}

const Timing* ProgramTiming::part(std::string_view name) const {
  for (const auto& [n, t] : parts)
    if (n == name) return &t;
  return nullptr;
}

Result<double> sample_us(Device& dev, EventHandle start, EventHandle stop) {
  const float ms = FT_TRY(dev.elapsed_ms(start, stop));
  if (!std::isfinite(ms) || ms < 0)
    return fail(Errc::device, fmt::format("the device's events gave {} ms for a repetition; no timing is recorded from "
                                          "times that are not a finite, non-negative number",
                                          ms));
  return double(ms) * 1000.0;
}

Result<L2Flush> L2Flush::create(Device& dev) {
  const std::size_t l2 = std::max<std::size_t>(dev.info().l2_bytes, 32u << 20);
  L2Flush f;
  f.buffer_ = FT_TRY(DeviceBuffer::allocate(dev, 2 * l2));
  return f;
}

Status L2Flush::operator()(Device& dev, StreamHandle s) const {
  return dev.memset_u32(buffer_.ptr(), 0x5a5a5a5au, buffer_.bytes() / 4, s);
}

Result<Timing> time_runs(Device& dev, const TimingOptions& opt, const L2Flush* flush, const std::function<Status()>& run) {
  if (opt.flush_l2 && !flush) return fail(Errc::internal, "time_runs: an L2 flush was asked for without its buffer");
  const EventHandle start = FT_TRY(dev.create_event());
  auto stop = dev.create_event();
  if (!stop) {
    (void)dev.destroy_event(start);
    return std::unexpected(stop.error());
  }
  std::vector<double> us;
  const Status st = [&]() -> Status {
    for (int i = 0; i < opt.warmup + std::max(1, opt.reps); ++i) {
      if (opt.flush_l2) FT_CHECK((*flush)(dev));
      FT_CHECK(dev.record(start));
      FT_CHECK(run());
      FT_CHECK(dev.record(*stop));
      FT_CHECK(dev.synchronize());
      const double sample = FT_TRY(sample_us(dev, start, *stop));
      if (i >= opt.warmup) us.push_back(sample);
    }
    return {};
  }();
  (void)dev.destroy_event(start);
  (void)dev.destroy_event(*stop);
  FT_CHECK(st);
  return summarize(std::move(us));
}

}  // namespace ft
