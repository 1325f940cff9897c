// The runtime under a server's load (runtime/check/soak.hpp): one runtime,
// several host threads on streams of their own, launches at token counts drawn
// over a range, every n-th checked against the reference; host and device
// memory, streams, modules and open files sampled from the warm-up's end to the
// end. Prints the report as JSON, RSS's course in one line and one verdict line.
//   ft_soak EXPORT_DIR [--emulate] [--device SEL] [--problem KEY] [--launches N]
//           [--tokens MIN..MAX] [--threads N] [--check-every N] [--warmup F]
//           [--samples N] [--seed N] [--heap-slack BYTES] [--rss-slack BYTES] [--no-trim]
// --rss-slack bounds what RSS's trend adds over the last half of the launches
// after the warm-up (default 16 MiB); --heap-slack the heap in use from the
// warm-up's end to the end (default 4 MiB). --no-trim: leave the checks'
// freed host buffers in malloc's arenas (SoakOptions::trim_after_checks).
// Exit: 0 every check passed and nothing grew, 1 otherwise, 2 usage, 125 no GPU.
#include <charconv>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "runtime/check/soak.hpp"

namespace {

template <class T>
bool number(std::string_view s, T& out) {
  const auto r = std::from_chars(s.data(), s.data() + s.size(), out);
  return r.ec == std::errc() && r.ptr == s.data() + s.size();
}

int usage(const char* why) {
  std::fprintf(stderr,
               "ft_soak: error: %s\nusage: ft_soak EXPORT_DIR [--emulate] [--device SEL] [--problem KEY] [--launches N] "
               "[--tokens MIN..MAX] [--threads N] [--check-every N] [--warmup F] [--samples N] [--seed N] "
               "[--heap-slack BYTES] [--rss-slack BYTES] [--no-trim]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  ft::check::SoakOptions o;
  std::size_t heap_slack = 4u << 20, rss_slack = 16u << 20;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const bool has_value = i + 1 < argc;
    const std::string_view v = has_value ? argv[i + 1] : "";
    bool ok = true;
    if (a == "--emulate") {
      o.emulate = true;
      continue;
    }
    if (a == "--no-trim") {
      o.trim_after_checks = false;
      continue;
    }
    if (a.starts_with("--") && !has_value) return usage((std::string(a) + " needs a value").c_str());
    if (a == "--device") o.device = v;
    else if (a == "--problem") o.problem = std::string(v);
    else if (a == "--launches") ok = number(v, o.launches);
    else if (a == "--threads") ok = number(v, o.threads);
    else if (a == "--check-every") ok = number(v, o.check_every);
    else if (a == "--samples") ok = number(v, o.samples);
    else if (a == "--seed") ok = number(v, o.seed);
    else if (a == "--heap-slack") ok = number(v, heap_slack);
    else if (a == "--rss-slack") ok = number(v, rss_slack);
    else if (a == "--warmup") ok = number(v, o.warmup);
    else if (a == "--tokens") {
      const auto dots = v.find("..");
      ok = dots != std::string_view::npos && number(v.substr(0, dots), o.tokens_min) && number(v.substr(dots + 2), o.tokens_max);
    } else if (!a.starts_with("--") && o.dir.empty()) {
      o.dir = a;
      continue;
    } else {
      return usage(("unknown argument '" + std::string(a) + "'").c_str());
    }
    if (!ok) return usage(("bad value '" + std::string(v) + "' for " + std::string(a)).c_str());
    ++i;
  }
  if (o.dir.empty()) return usage("no export folder");
  auto report = ft::check::soak_export(o);
  if (!report) {
    std::fprintf(stderr, "ft_soak: error: %s\n", report.error().describe().c_str());
    return report.error().code == ft::Errc::no_device ? 125 : report.error().code == ft::Errc::usage ? 2 : 1;
  }
  std::printf("%s\n", report->json().c_str());
  std::printf("ft_soak: %s\n", ft::check::rss_summary(report->series).c_str());
  const auto grew = report->growth(heap_slack, rss_slack);
  for (const std::string& g : grew) std::printf("ft_soak: grew: %s\n", g.c_str());
  for (const std::string& f : report->failures) std::printf("ft_soak: failed: %s\n", f.c_str());
  const bool passed = grew.empty() && report->check_failures == 0 && report->errors == 0;
  std::printf("ft_soak: %s: %ld launches (T %d..%d, %zu buckets) in %.1f s on %s, %d threads; %ld of %ld checks passed; "
              "%s\n",
              passed ? "passed" : "FAILED", report->launches, report->tokens_min_seen, report->tokens_max_seen,
              report->buckets_seen.size(), report->seconds, report->device.c_str(), o.threads,
              report->checks - report->check_failures, report->checks, grew.empty() ? "nothing grew after the warm-up, RSS levelled off" : "growth");
  return passed ? 0 : 1;
}
