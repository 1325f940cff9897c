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

Result<MarkedTiming> time_marked_runs(Device& dev, const TimingOptions& opt, const L2Flush* flush, std::size_t marks,
                                      const std::function<Status(std::span<const EventHandle>)>& run,
                                      StreamHandle stream) {
  if (opt.flush_l2 && !flush) return fail(Errc::internal, "time_runs: an L2 flush was asked for without its buffer");
  if (marks < 2) return fail(Errc::internal, "time_marked_runs: at least two marks, the first and the last");
  std::vector<EventHandle> ev;
  MarkedTiming out;
  out.intervals.resize(marks - 1);
  std::vector<double> total;
  const Status st = [&]() -> Status {
    while (ev.size() < marks) ev.push_back(FT_TRY(dev.create_event()));
    for (int i = 0; i < opt.warmup + std::max(1, opt.reps); ++i) {
      if (opt.flush_l2) FT_CHECK((*flush)(dev, stream));
      FT_CHECK(run(ev));
      FT_CHECK(dev.synchronize(stream));
      if (i < opt.warmup) continue;
      total.push_back(FT_TRY(sample_us(dev, ev.front(), ev.back())));
      for (std::size_t m = 0; m + 1 < marks; ++m) out.intervals[m].push_back(FT_TRY(sample_us(dev, ev[m], ev[m + 1])));
    }
    return {};
  }();
  for (EventHandle e : ev) (void)dev.destroy_event(e);
  FT_CHECK(st);
  out.total = summarize(std::move(total));
  return out;
}

Result<Timing> time_runs(Device& dev, const TimingOptions& opt, const L2Flush* flush, const std::function<Status()>& run) {
  auto t = time_marked_runs(dev, opt, flush, 2, [&](std::span<const EventHandle> marks) -> Status {
    FT_CHECK(dev.record(marks.front()));
    FT_CHECK(run());
    return dev.record(marks.back());
  });
  if (!t) return std::unexpected(t.error());
  return t->total;
}

}  // namespace ft
