#pragma once
// A seeded MoE workload for a Problem and a token count: X [T, H], W1 [E, 2I, H],
// W2 [E, H, I] as 16-bit floats (raw bits), and the routing (top-k expert ids and
// weights per token). The same (problem, T, options) always gives the same bytes.
//
// Tensor elements are counter-based and bit-for-bit those of the device fill
// kernel (templates/ft/random_fill.hpp, used by tuner/layer): element i of a
// tensor is random_normal(tensor_seed(seed, tensor), i) * scale, an
// Irwin-Hall(4) approximation of N(0, 1) bounded at +-3.46, with scales that
// keep every stage's output O(1): X ~ N(0, 1), W1 ~ N(0, 1/H), W2 ~ N(0, 1/I).
#include <cstdint>
#include <string>
#include <vector>

#include "generator/error.hpp"
#include "generator/problem.hpp"

namespace ft {

struct WorkloadOptions {
  std::uint64_t seed = 1;
  // The last `empty_experts` experts receive no tokens (the kernels must cope
  // with experts whose row runs are empty). Not with replay routing.
  int empty_experts = 0;
};

struct Workload {
  Problem problem;
  int tokens = 0;
  std::uint64_t seed = 0;
  std::vector<std::uint16_t> x;          // [T, H]
  std::vector<std::uint16_t> w1;         // [E, 2I, H]: gate rows, then up rows
  std::vector<std::uint16_t> w2;         // [E, H, I]
  std::vector<std::int32_t> topk_ids;    // [T, k], distinct experts per token
  std::vector<float> topk_weights;       // [T, k], softmax over the chosen experts

  long long pairs() const { return (long long)tokens * problem.topk; }
  std::vector<int> tokens_per_expert() const;
};

enum class TensorStream : std::uint32_t { x = 1, w1 = 2, w2 = 3 };

// The fill seed of a tensor: seed * 3 + 1 (X), + 2 (W1), + 3 (W2).
std::uint64_t tensor_seed(std::uint64_t seed, TensorStream tensor);
// Element `index` of the stream seeded `fill_seed`, before scaling.
float random_normal(std::uint64_t fill_seed, std::uint64_t index);
// The scale of a tensor: 1 (X), 1/sqrt(H) (W1), 1/sqrt(I) (W2).
float tensor_scale(const Problem& problem, TensorStream tensor);

// Errors: Errc::invalid_input (an invalid problem, T < 1, too many empty
// experts for top-k, a malformed replay file: one line naming file, line and
// what is wrong), Errc::io (an unreadable replay file).
Result<Workload> make_workload(const Problem& problem, int tokens, const WorkloadOptions& options = {});

// The routing alone: [T, k] expert ids and weights.
struct Routed {
  std::vector<std::int32_t> ids;
  std::vector<float> weights;
};
Result<Routed> make_routing(const Problem& problem, int tokens, const WorkloadOptions& options = {});

// A replay file: one token per line, k expert ids separated by spaces or commas;
// blank lines and lines starting with '#' are skipped. Token t uses record t mod n.
Result<std::vector<std::vector<int>>> read_replay_file(const std::string& path, int experts, int topk);

}  // namespace ft
