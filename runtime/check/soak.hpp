#pragma once
// A server's life in minutes: one runtime shared by several host threads, each
// launching layers on a stream of its own at token counts drawn over a range
// (log-uniform: small batches most often, the largest ones too), every launch
// selecting its plan and freeing it as a request would; every n-th launch of a
// thread is checked against the reference kernels on poisoned output. Host
// memory (RSS and its file-backed share, the heap in use and what malloc
// holds), the device's live allocations, streams, events, graphs, modules and
// the process's open files are sampled with every thread's stream idle at
// evenly spaced points from the end of a warm-up to the end. Allocations,
// handles and the heap are judged between the first sample and the last (a
// runtime that leaks grows between the two); RSS, which caches fill for a
// while (the driver's code paged in, the allocator's high-water marks), by its
// trend over the last half of the launches after the warm-up: a leak keeps
// growing there, a cache has levelled off.
// The emulator test (tests/emu/runtime_soak_test.cpp) and the GPU benchmark
// (runtime/examples/soak.cpp, scripts/h200-soak.sh) run this.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace ft::check {

struct SoakOptions {
  std::string dir;
  bool emulate = false;
  std::string device;                  // GPU selector ("cuda:0"); "": the first GPU
  std::optional<std::string> problem;  // default: the export's first problem
  long launches = 100000;              // in all, over every thread
  int tokens_min = 1, tokens_max = 20000;
  int threads = 4;                     // host threads sharing one runtime, each on a stream of its own
  int check_every = 1000;              // each thread checks every n-th of its launches (its first one too)
  double warmup = 0.1;                 // the share of each thread's launches before the first sample
  int samples = 16;                    // samples from the warm-up's end to the end (the end's included)
  // After each check, malloc_trim: the check's own large host buffers, freed,
  // would otherwise stay in glibc's arenas and raise RSS in steps (measured on
  // the H200: +32 MB over 150,000 tiny launches, +95 MB over 2,000 Mixtral
  // ones, all of it free memory malloc held; flat without the checks).
  bool trim_after_checks = true;
  std::uint64_t seed = 0x50a4;
  // Test-only: each launch keeps this many bytes of anonymous memory (mapped
  // and touched, outside malloc, as a driver's own leak would look) until the
  // soak returns: the RSS verdict must report it.
  std::size_t test_leak_bytes_per_launch = 0;
};

// What is live at one moment.
struct SoakSample {
  long launches = 0;             // launches done by then, over every thread
  std::size_t rss_bytes = 0;     // resident set (/proc/self/statm)
  std::size_t rss_file_bytes = 0;  // of it, pages backed by a file or shared memory (libraries' code and data)
  std::size_t heap_bytes = 0;    // host heap in use (mallinfo2: every arena and mmapped blocks)
  std::size_t malloc_held_bytes = 0;  // what malloc holds from the system, in use or free (arenas + mmapped blocks)
  std::size_t device_allocations = 0, device_bytes = 0;
  long streams = 0, events = 0, graphs = 0, modules = 0;
  long open_files = 0;           // /proc/self/fd
};

struct SoakReport {
  std::string device, problem;
  long launches = 0, checks = 0, check_failures = 0, errors = 0;
  std::vector<std::string> failures;  // the first few failed checks or calls, one line each
  int tokens_min_seen = 0, tokens_max_seen = 0;
  std::vector<int> buckets_seen;      // the tuned buckets the launches' plans used
  SoakSample after_warmup, at_end;
  std::vector<SoakSample> series;     // after_warmup, evenly spaced samples, at_end
  double seconds = 0;                 // the launches' wall time, warm-up included
  // growth(after_warmup, at_end, heap_slack) and rss_growth(series, rss_slack)
  std::vector<std::string> growth(std::size_t heap_slack, std::size_t rss_slack) const;
  std::string json() const;
};

// RSS over the last half of a series (the samples at or after the middle of
// its launches): the least-squares slope and what it adds over that half.
struct RssTrend {
  long from_launches = 0, to_launches = 0;
  int points = 0;
  double bytes_per_launch = 0;
  double projected_bytes = 0;  // bytes_per_launch * (to_launches - from_launches)
};
RssTrend rss_trend(const std::vector<SoakSample>& series);
// One line if the trend adds more than `rss_slack` bytes over the last half.
std::vector<std::string> rss_growth(const std::vector<SoakSample>& series, std::size_t rss_slack);
// RSS over the run, one line: after the warm-up -> end, the file-backed, other
// and malloc-held parts of the change, and the last half's trend.
std::string rss_summary(const std::vector<SoakSample>& series);

struct Observed;  // observed_device.hpp
// What is live now: the process's memory and files, the device's as `seen`.
SoakSample sample_now(Observed& seen, long launches = 0);
// What grew from `before` to `after`: any live device allocation, byte,
// stream, event, graph, module or open file, the host heap beyond
// `heap_slack` bytes; one line each (RSS: rss_growth).
std::vector<std::string> growth(const SoakSample& before, const SoakSample& after, std::size_t heap_slack);

// Errc::no_device without a GPU (emulate = false); a failed launch or check is
// in the report, not an error.
Result<SoakReport> soak_export(const SoakOptions& options);

}  // namespace ft::check
