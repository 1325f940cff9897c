// The soak's measurements of the process (soak.hpp): what is live at one
// moment, what grew between two samples, and RSS's trend over a series.
#include <dirent.h>
#include <malloc.h>
#include <unistd.h>

#include <cstdio>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "runtime/check/observed_device.hpp"
#include "runtime/check/soak.hpp"

namespace ft::check {
namespace {

long open_files() {
  long n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

// Resident pages and, of them, those backed by a file or shared memory
// (/proc/self/statm's second and third fields: RssFile + RssShmem).
void resident(std::size_t& rss, std::size_t& file) {
  long pages = 0, res = 0, shared = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%ld %ld %ld", &pages, &res, &shared) != 3) res = shared = 0;
    std::fclose(f);
  }
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  rss = std::size_t(res) * page;
  file = std::size_t(shared) * page;
}

double mb(double bytes) { return bytes / 1e6; }

nlohmann::json sample_json(const SoakSample& x) {
  return nlohmann::json{{"launches", x.launches},
                        {"rss_bytes", x.rss_bytes},
                        {"rss_file_bytes", x.rss_file_bytes},
                        {"heap_bytes", x.heap_bytes},
                        {"malloc_held_bytes", x.malloc_held_bytes},
                        {"device_allocations", x.device_allocations},
                        {"device_bytes", x.device_bytes},
                        {"streams", x.streams},
                        {"events", x.events},
                        {"graphs", x.graphs},
                        {"modules", x.modules},
                        {"open_files", x.open_files}};
}

}  // namespace

SoakSample sample_now(Observed& seen, long launches) {
  const struct mallinfo2 m = mallinfo2();
  SoakSample s;
  s.launches = launches;
  resident(s.rss_bytes, s.rss_file_bytes);
  s.heap_bytes = m.uordblks + m.hblkhd;
  s.malloc_held_bytes = m.arena + m.hblkhd;
  s.open_files = open_files();
  std::lock_guard l(seen.mutex);
  s.device_allocations = seen.allocations.size();
  s.device_bytes = seen.allocated_bytes;
  s.streams = seen.streams, s.events = seen.events, s.graphs = seen.graphs, s.modules = seen.modules;
  return s;
}

std::vector<std::string> SoakReport::growth(std::size_t heap_slack, std::size_t rss_slack) const {
  std::vector<std::string> out = check::growth(after_warmup, at_end, heap_slack);
  for (std::string& line : rss_growth(series, rss_slack)) out.push_back(std::move(line));
  return out;
}

std::vector<std::string> growth(const SoakSample& a, const SoakSample& b, std::size_t heap_slack) {
  std::vector<std::string> out;
  auto exact = [&](const char* what, long long before, long long after) {
    if (after != before) out.push_back(fmt::format("{}: {} before, {} after", what, before, after));
  };
  exact("live device allocations", (long long)a.device_allocations, (long long)b.device_allocations);
  exact("device bytes allocated", (long long)a.device_bytes, (long long)b.device_bytes);
  exact("streams", a.streams, b.streams);
  exact("events", a.events, b.events);
  exact("graphs", a.graphs, b.graphs);
  exact("modules", a.modules, b.modules);
  exact("open files", a.open_files, b.open_files);
  if (b.heap_bytes > a.heap_bytes + heap_slack)
    out.push_back(fmt::format("host heap in use grew by {} bytes (allowed {})", b.heap_bytes - a.heap_bytes, heap_slack));
  return out;
}

RssTrend rss_trend(const std::vector<SoakSample>& series) {
  RssTrend t;
  if (series.size() < 2) return t;
  const long middle = (series.front().launches + series.back().launches) / 2;
  std::vector<const SoakSample*> half;
  for (const SoakSample& s : series)
    if (s.launches >= middle) half.push_back(&s);
  if (half.size() < 2) half = {&series[series.size() - 2], &series.back()};
  double mx = 0, my = 0;
  for (const SoakSample* s : half) mx += double(s->launches), my += double(s->rss_bytes);
  mx /= double(half.size()), my /= double(half.size());
  double sxx = 0, sxy = 0;
  for (const SoakSample* s : half) {
    sxx += (double(s->launches) - mx) * (double(s->launches) - mx);
    sxy += (double(s->launches) - mx) * (double(s->rss_bytes) - my);
  }
  t.from_launches = half.front()->launches;
  t.to_launches = half.back()->launches;
  t.points = int(half.size());
  t.bytes_per_launch = sxx > 0 ? sxy / sxx : 0;
  t.projected_bytes = t.bytes_per_launch * double(t.to_launches - t.from_launches);
  return t;
}

std::vector<std::string> rss_growth(const std::vector<SoakSample>& series, std::size_t rss_slack) {
  const RssTrend t = rss_trend(series);
  if (t.projected_bytes <= double(rss_slack)) return {};
  return {fmt::format("RSS keeps growing over the last half (launches {}..{}, {} samples): {:.0f} bytes a launch, "
                      "+{:.1f} MB over that half (allowed {:.1f} MB)",
                      t.from_launches, t.to_launches, t.points, t.bytes_per_launch, mb(t.projected_bytes), mb(double(rss_slack)))};
}

std::string rss_summary(const std::vector<SoakSample>& series) {
  if (series.empty()) return "RSS: no samples";
  const SoakSample &a = series.front(), &b = series.back();
  auto d = [](std::size_t x, std::size_t y) { return mb(double(y) - double(x)); };
  const RssTrend t = rss_trend(series);
  return fmt::format("RSS after the warm-up {:.1f} MB -> end {:.1f} MB ({:+.1f} MB: file-backed {:+.1f}, anonymous {:+.1f}, "
                     "malloc's holding {:+.1f} with its bytes in use {:+.1f}); over the last half (launches {}..{}) "
                     "{:+.1f} MB by the trend",
                     mb(double(a.rss_bytes)), mb(double(b.rss_bytes)), d(a.rss_bytes, b.rss_bytes),
                     d(a.rss_file_bytes, b.rss_file_bytes),
                     d(a.rss_bytes - a.rss_file_bytes, b.rss_bytes - b.rss_file_bytes),
                     d(a.malloc_held_bytes, b.malloc_held_bytes), d(a.heap_bytes, b.heap_bytes), t.from_launches,
                     t.to_launches, mb(t.projected_bytes));
}

std::string SoakReport::json() const {
  nlohmann::json series_json = nlohmann::json::array();
  for (const SoakSample& x : series) series_json.push_back(sample_json(x));
  const RssTrend t = rss_trend(series);
  nlohmann::json j{{"device", device},
                   {"problem", problem},
                   {"launches", launches},
                   {"checks", checks},
                   {"check_failures", check_failures},
                   {"errors", errors},
                   {"failures", failures},
                   {"tokens_seen", {tokens_min_seen, tokens_max_seen}},
                   {"buckets_seen", buckets_seen},
                   {"after_warmup", sample_json(after_warmup)},
                   {"at_end", sample_json(at_end)},
                   {"series", std::move(series_json)},
                   {"rss_last_half", {{"from_launches", t.from_launches},
                                      {"to_launches", t.to_launches},
                                      {"points", t.points},
                                      {"bytes_per_launch", t.bytes_per_launch},
                                      {"projected_bytes", t.projected_bytes}}},
                   {"seconds", seconds},
                   {"launches_per_second", seconds > 0 ? double(launches) / seconds : 0.0}};
  return j.dump(1);
}

}  // namespace ft::check
