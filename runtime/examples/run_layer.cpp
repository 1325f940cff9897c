// Loads a `flytune export` folder and runs the MoE layer through the C API on
// random inputs at a few token counts, checking Y against the support unit's
// reference kernels (the check flytune check-export runs, uniform routing).
//   ft_run_layer EXPORT_DIR [PROBLEM_KEY] [T,T,...]
// Exit: 0 all match, 1 a mismatch or error, 2 usage, 125 no GPU.
#include <cstdio>
#include <string>

#include "generator/problem.hpp"
#include "runtime/check/check_export.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s EXPORT_DIR [PROBLEM_KEY] [T,T,...]\n", argv[0]);
    return 2;
  }
  ft::check::CheckOptions o;
  o.dir = argv[1];
  if (argc >= 3 && argv[2][0]) o.problem = argv[2];
  o.tokens = {1, 5, 64, 700, 4096};
  if (argc == 4) {
    auto t = ft::parse_token_list(argv[3]);
    if (!t) {
      std::fprintf(stderr, "ft_run_layer: error: %s\n", t.error().describe().c_str());
      return 2;
    }
    o.tokens = *t;
  }
  o.routings = {"uniform"};
  auto report = ft::check::check_export(o);
  if (!report) {
    std::fprintf(stderr, "ft_run_layer: error: %s\n", report.error().describe().c_str());
    return report.error().code == ft::Errc::no_device ? 125 : 1;
  }
  std::printf("export for %s on %s\n%s", report->target.c_str(), report->device.c_str(), report->table().c_str());
  return report->failures() ? 1 : 0;
}
