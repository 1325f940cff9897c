#pragma once
// A server's life in minutes: one runtime shared by several host threads, each
// launching layers on a stream of its own at token counts drawn over a range
// (log-uniform: small batches most often, the largest ones too), every launch
// selecting its plan and freeing it as a request would; every n-th launch of a
// thread is checked against the reference kernels on poisoned output. Host
// memory (RSS, the heap in use), the device's live allocations, streams,
// events, graphs, modules and the process's open files are sampled after a
// warm-up and at the end: a runtime that leaks grows between the two.
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
  std::uint64_t seed = 0x50a4;
};

// What is live at one moment.
struct SoakSample {
  long launches = 0;             // launches done by then, over every thread
  std::size_t rss_bytes = 0;     // resident set (/proc/self/statm)
  std::size_t heap_bytes = 0;    // host heap in use (mallinfo2: every arena and mmapped blocks)
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
  double seconds = 0;                 // the launches' wall time, warm-up included
  // growth(after_warmup, at_end, ...)
  std::vector<std::string> growth(std::size_t heap_slack, std::size_t rss_slack) const;
  std::string json() const;
};

struct Observed;  // observed_device.hpp
// What is live now: the process's memory and files, the device's as `seen`.
SoakSample sample_now(Observed& seen, long launches = 0);
// What grew from `before` to `after`: any live device allocation, byte,
// stream, event, graph, module or open file, the host heap beyond
// `heap_slack` bytes, RSS beyond `rss_slack`; one line each.
std::vector<std::string> growth(const SoakSample& before, const SoakSample& after, std::size_t heap_slack,
                                std::size_t rss_slack);

// Errc::no_device without a GPU (emulate = false); a failed launch or check is
// in the report, not an error.
Result<SoakReport> soak_export(const SoakOptions& options);

}  // namespace ft::check
