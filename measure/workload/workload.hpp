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
//
// fp8 problems (Problem::fp8): X is bf16 with a magnitude (0.25 .. 4) per 128
// values, W1 and W2 are e4m3 codes of random_normalish x kFp8CodeSpread in the
// workload's format, their scales base x a magnitude each (base 1 / (64 sqrt(K)),
// so the dequantised weights are again ~ N(0, m^2 / K)), and per-tensor layers
// get the static activation scale fp8_x_scale (static layers too, and their
// static intermediate scale calibrated on the batch: calibrated_inter_scale,
// measure/workload/reference.hpp): every scale group differs from its
// neighbours, so a kernel reading the wrong scale fails.
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "generator/problem.hpp"
#include "generator/device_facts.hpp"  // ft::Elem (templates/ft/elem.hpp)

namespace ft {

struct WorkloadOptions {
  std::uint64_t seed = 1;
  // The last `empty_experts` experts receive no tokens (the kernels must cope
  // with experts whose row runs are empty). Not with replay routing.
  int empty_experts = 0;
  // fp8 problems: the codes' format, the target's (e4m3 on sm_90a and gfx950, e4m3fnuz on gfx942).
  Elem fp8_format = Elem::e4m3;
};

struct Workload {
  Problem problem;
  int tokens = 0;
  std::uint64_t seed = 0;
  std::vector<std::uint16_t> x;          // [T, H] (bf16 for fp8 problems)
  std::vector<std::uint16_t> w1;         // [E, 2I, H]: gate rows, then up rows (16-bit problems)
  std::vector<std::uint16_t> w2;         // [E, H, I] (16-bit problems)
  std::vector<std::int32_t> topk_ids;    // [T, k], distinct experts per token
  std::vector<float> topk_weights;       // [T, k], softmax over the chosen experts
  // fp8 problems: the codes (fp8_format), their scales (templates/ft/moe_args.hpp,
  // ft::Scales) and, per-tensor and static, the static activation scale [1].
  Elem fp8_format = Elem::e4m3;
  std::vector<std::uint8_t> w1q, w2q;    // [E, 2I, H], [E, H, I]
  std::vector<float> w1_scales, w2_scales, x_scale;
  // static scales: [1] the calibrated static intermediate scale (calibrated_inter_scale).
  std::vector<float> inter_scale;

  long long pairs() const { return (long long)tokens * problem.topk; }
  std::vector<int> tokens_per_expert() const;
};

enum class TensorStream : std::uint32_t { x = 1, w1 = 2, w2 = 3, w1_scales = 5, w2_scales = 6 };

// The fill seed of a tensor: seed * 3 + 1 (X), + 2 (W1), + 3 (W2).
std::uint64_t tensor_seed(std::uint64_t seed, TensorStream tensor);
// Element `index` of the stream seeded `fill_seed`, before scaling.
float random_normal(std::uint64_t fill_seed, std::uint64_t index);
// The scale of a tensor: 1 (X), 1/sqrt(H) (W1), 1/sqrt(I) (W2); fp8 problems'
// W1 and W2 codes: kFp8CodeSpread, their scales' base: 1 / (kFp8CodeSpread sqrt(K)).
float tensor_scale(const Problem& problem, TensorStream tensor);
// fp8 X: elements i and j share a magnitude when i / 128 == j / 128 (0 for 16-bit problems).
int magnitude_group(const Problem& problem, TensorStream tensor);
// The static per-tensor activation scale of the generated X (|x| <= 13.86): 14 / max.
float fp8_x_scale(Elem format);

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
