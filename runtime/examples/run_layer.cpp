// Loads a `flytune export` folder and runs the MoE layer on random inputs at a
// few token counts, checking Y against the support unit's reference kernels.
//   ft_run_layer EXPORT_DIR [PROBLEM_KEY] [T,T,...]
// Exit: 0 all match, 1 a mismatch or error, 2 usage, 125 no GPU.
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "layer_check.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 4) {
    std::fprintf(stderr, "usage: %s EXPORT_DIR [PROBLEM_KEY] [T,T,...]\n", argv[0]);
    return 2;
  }
  char err[1024] = {0};
  ft_runtime* rt = nullptr;
  const int opened = ft_runtime_open(argv[1], &rt, err, sizeof err);
  if (opened != FT_OK) {
    std::fprintf(stderr, "ft_run_layer: error: %s\n", err);
    return opened == FT_ERR_DEVICE ? 125 : 1;
  }
  std::string key = argc >= 3 ? argv[2] : "";
  if (key.empty()) key = ft_runtime_problem_key(rt, 0);
  std::vector<int> tokens{1, 5, 64, 700, 4096};
  if (argc == 4) {
    tokens.clear();
    std::stringstream list(argv[3]);
    for (std::string t; std::getline(list, t, ',');) tokens.push_back(std::stoi(t));
  }
  std::printf("export for %s, problem %s\n", ft_runtime_target(rt), key.c_str());
  int failures = 0;
  for (int t : tokens) {
    const ft::example::LayerCheck c = ft::example::check_layer(rt, key, t, 0x5eed + std::uint64_t(t));
    std::printf("T=%-6d bucket %-6d %s  %s\n", t, c.bucket, c.passed ? "ok  " : "FAIL", c.summary.c_str());
    failures += c.passed ? 0 : 1;
  }
  ft_runtime_close(rt);
  return failures ? 1 : 0;
}
