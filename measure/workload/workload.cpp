#include "measure/workload/workload.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "generator/device_facts.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/reference.hpp"

namespace ft {
namespace {

// Routing decisions and router logits: streams of their own, apart from the
// tensor fill seeds (which are seed * 3 + 1..3).
enum class HostStream : std::uint64_t { routing = 0x726f757465ull, logits = 0x6c6f67697473ull };

std::uint64_t counter_hash(std::uint64_t seed, HostStream stream, std::uint64_t index) {
  return splitmix64(splitmix64(seed ^ std::uint64_t(stream)) ^ splitmix64(index));
}

// A sequential stream of 64-bit numbers for the routing decisions.
class Sequence {
 public:
  Sequence(std::uint64_t seed, HostStream stream) : seed_(seed), stream_(stream) {}
  std::uint64_t next() { return counter_hash(seed_, stream_, count_++); }
  // Uniform in [0, n) (multiply-shift; the bias is below 2^-40 for small n).
  int below(int n) { return int((unsigned __int128)next() * unsigned(n) >> 64); }
  double unit() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t seed_;
  HostStream stream_;
  std::uint64_t count_ = 0;
};

// out[i] = value(i) for i < count, on a few threads for large tensors.
template <class T, class Value>
void fill_parallel(std::vector<T>& out, std::size_t count, Value value) {
  out.resize(count);
  const unsigned workers = std::clamp(unsigned(count / (1u << 20)), 1u, std::max(1u, std::thread::hardware_concurrency()));
  auto fill = [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) out[i] = value(i);
  };
  if (workers == 1) return fill(0, count);
  std::vector<std::jthread> threads;
  for (unsigned w = 0; w < workers; ++w) threads.emplace_back(fill, count * w / workers, count * (w + 1) / workers);
}

void fill_tensor(std::vector<std::uint16_t>& out, std::size_t count, std::uint64_t fill_seed, float scale, DType dtype,
                 int group = 0) {
  fill_parallel(out, count, [&](std::size_t i) { return f32_to_half(dtype, random_input(fill_seed, i, scale, group)); });
}

// The device fill's e4m3 codes (elem 2) and fp32 scales (elem 3), templates/ft/random_fill.hpp.
void fill_codes(std::vector<std::uint8_t>& out, std::size_t count, std::uint64_t fill_seed, Elem format) {
  fill_parallel(out, count, [&](std::size_t i) {
    const float v = random_input(fill_seed, i, kFp8CodeSpread, 0);
    return format == Elem::e4m3fnuz ? f32_to_e4m3fnuz(v) : f32_to_e4m3(v);
  });
}
void fill_scales(std::vector<float>& out, std::size_t count, std::uint64_t fill_seed, float base) {
  fill_parallel(out, count, [&](std::size_t i) { return random_scale(fill_seed, i, base); });
}

// A value of the logits stream, approximately N(0, 1).
float logit_value(std::uint64_t seed, std::uint64_t index) {
  return normalish_of_hash(counter_hash(seed, HostStream::logits, index));
}

std::vector<double> zipf_weights(int n, double s) {
  std::vector<double> p(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) p[std::size_t(r)] = 1.0 / std::pow(double(r + 1), s);
  return p;
}

}  // namespace

std::uint64_t tensor_seed(std::uint64_t seed, TensorStream tensor) { return seed * 3 + std::uint64_t(tensor); }

// The device fill's own numbers (templates/ft/random.hpp).
float random_normal(std::uint64_t fill_seed, std::uint64_t index) { return random_normalish(fill_seed, index); }

float tensor_scale(const Problem& p, TensorStream tensor) {
  switch (tensor) {
    case TensorStream::x: return 1.0f;
    case TensorStream::w1: return p.fp8() ? kFp8CodeSpread : float(1.0 / std::sqrt(double(p.hidden)));
    case TensorStream::w2: return p.fp8() ? kFp8CodeSpread : float(1.0 / std::sqrt(double(p.inter)));
    case TensorStream::w1_scales: return float(1.0 / (kFp8CodeSpread * std::sqrt(double(p.hidden))));
    case TensorStream::w2_scales: return float(1.0 / (kFp8CodeSpread * std::sqrt(double(p.inter))));
  }
  return 1.0f;
}

int magnitude_group(const Problem& p, TensorStream tensor) { return p.fp8() && tensor == TensorStream::x ? kScaleGroup : 0; }

float fp8_x_scale(Elem format) { return 14.0f / (format == Elem::e4m3fnuz ? fp8_max<Elem::e4m3fnuz>() : fp8_max<Elem::e4m3>()); }

std::vector<int> Workload::tokens_per_expert() const {
  std::vector<int> counts(std::size_t(problem.experts), 0);
  for (int e : topk_ids)
    if (e >= 0 && e < problem.experts) ++counts[std::size_t(e)];
  return counts;
}

Result<std::vector<std::vector<int>>> read_replay_file(const std::string& path, int experts, int topk) {
  std::ifstream in(path);
  if (!in) return fail(Errc::io, "cannot read the routing replay file", path);
  std::vector<std::vector<int>> records;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    const auto first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#') continue;
    std::vector<int> ids;
    std::string token;
    bool bad_token = false;
    auto flush = [&] {
      if (token.empty()) return;
      int v = 0;
      const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
      if (ec != std::errc() || end != token.data() + token.size()) bad_token = true;
      ids.push_back(v);
      token.clear();
    };
    for (char c : line) {
      if (c == ' ' || c == '\t' || c == ',' || c == '\r') flush();
      else token += c;
    }
    flush();
    auto bad = [&](const std::string& what) {
      return fail(Errc::invalid_input, fmt::format("line {}: {}; expected {} distinct expert ids in [0, {}) per line", number, what,
                                                   topk, experts),
                  path);
    };
    if (bad_token) return bad(fmt::format("'{}' is not a list of integers", line));
    if (int(ids.size()) != topk) return bad(fmt::format("{} ids", ids.size()));
    for (int v : ids)
      if (v < 0 || v >= experts) return bad(fmt::format("expert id {} out of range", v));
    std::vector<int> sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return bad("an expert id repeats");
    records.push_back(std::move(ids));
  }
  if (records.empty()) return fail(Errc::invalid_input, "the routing replay file has no tokens", path);
  return records;
}

Result<Routed> make_routing(const Problem& problem, int tokens, const WorkloadOptions& options) {
  FT_CHECK(problem.validate());
  if (tokens < 1) return fail(Errc::invalid_input, fmt::format("token count {} (needs at least 1)", tokens));
  const int E = problem.experts, k = problem.topk;
  const Routing& routing = problem.routing;
  if (options.empty_experts < 0 || options.empty_experts >= E)
    return fail(Errc::invalid_input, fmt::format("{} empty experts of {}", options.empty_experts, E));
  if (options.empty_experts > 0 && routing.kind == Routing::Kind::replay)
    return fail(Errc::invalid_input, "empty experts cannot be forced on replayed routing; edit the replay file instead");
  const int allowed = E - options.empty_experts;
  if (allowed < k)
    return fail(Errc::invalid_input,
                fmt::format("with {} empty experts only {} remain, fewer than top-{}", options.empty_experts, allowed, k));

  Routed out;
  out.ids.resize(std::size_t(tokens) * std::size_t(k));
  out.weights.resize(out.ids.size());
  Sequence seq(options.seed, HostStream::routing);
  std::vector<int> pool;
  std::vector<double> weights;

  if (routing.kind == Routing::Kind::replay) {
    const auto records = FT_TRY(read_replay_file(routing.replay_file, E, k));
    for (int t = 0; t < tokens; ++t)
      std::copy_n(records[std::size_t(t) % records.size()].begin(), k, out.ids.begin() + std::ptrdiff_t(t) * k);
  } else {
    int candidates = allowed;
    if (routing.kind == Routing::Kind::hot) {
      candidates = std::min(routing.hot_experts, allowed);
      if (candidates < k)
        return fail(Errc::invalid_input, fmt::format("routing hot:{} with {} empty experts leaves {} experts for top-{}",
                                                     routing.hot_experts, options.empty_experts, candidates, k));
    }
    const std::vector<double> zipf =
        routing.kind == Routing::Kind::zipf ? zipf_weights(candidates, routing.zipf_s) : std::vector<double>{};
    for (int t = 0; t < tokens; ++t) {
      pool.resize(std::size_t(candidates));
      std::iota(pool.begin(), pool.end(), 0);
      int* slot = out.ids.data() + std::ptrdiff_t(t) * k;
      if (routing.kind == Routing::Kind::zipf) {
        // Weighted draws without replacement: expert r is chosen with weight 1/(r+1)^s.
        weights = zipf;
        for (int s = 0; s < k; ++s) {
          const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
          double u = seq.unit() * total;
          std::size_t pick = weights.size(), last = 0;
          for (std::size_t i = 0; i < weights.size(); ++i) {
            if (weights[i] == 0.0) continue;
            last = i;
            if (u < weights[i]) {
              pick = i;
              break;
            }
            u -= weights[i];
          }
          if (pick == weights.size()) pick = last;  // rounding at the end of the range
          slot[s] = int(pick);
          weights[pick] = 0.0;
        }
      } else {
        // uniform / hot: a partial Fisher-Yates shuffle of the candidates.
        for (int s = 0; s < k; ++s) {
          const int j = s + seq.below(candidates - s);
          std::swap(pool[std::size_t(s)], pool[std::size_t(j)]);
          slot[s] = pool[std::size_t(s)];
        }
      }
    }
  }
  // Routed weights: softmax of random logits over each token's chosen experts.
  for (int t = 0; t < tokens; ++t) {
    std::vector<float> logits(static_cast<std::size_t>(k));
    float mx = -1e30f;
    const int kk = k;
    for (int s = 0; s < kk; ++s) {
      logits[std::size_t(s)] = logit_value(options.seed, std::uint64_t(t) * k + s);
      mx = std::max(mx, logits[std::size_t(s)]);
    }
    float sum = 0;
    for (int s = 0; s < kk; ++s) sum += (logits[std::size_t(s)] = std::exp(logits[std::size_t(s)] - mx));
    for (int s = 0; s < kk; ++s) out.weights[std::size_t(t) * k + s] = logits[std::size_t(s)] / sum;
  }
  return out;
}

Result<Workload> make_workload(const Problem& problem, int tokens, const WorkloadOptions& options) {
  auto routed = FT_TRY(make_routing(problem, tokens, options));
  Workload w;
  w.problem = problem;
  w.tokens = tokens;
  w.seed = options.seed;
  const std::size_t T = std::size_t(tokens), H = std::size_t(problem.hidden), I = std::size_t(problem.inter),
                    E = std::size_t(problem.experts);
  const std::uint64_t seed = options.seed;
  if (problem.fp8()) {
    const DType act = DType::bf16;  // X of an fp8 layer
    w.fp8_format = options.fp8_format;
    fill_tensor(w.x, T * H, tensor_seed(seed, TensorStream::x), tensor_scale(problem, TensorStream::x), act,
                magnitude_group(problem, TensorStream::x));
    fill_codes(w.w1q, E * 2 * I * H, tensor_seed(seed, TensorStream::w1), w.fp8_format);
    fill_codes(w.w2q, E * H * I, tensor_seed(seed, TensorStream::w2), w.fp8_format);
    fill_scales(w.w1_scales, std::size_t(weight_scale_count(problem.scales, E, 2 * I, H)), tensor_seed(seed, TensorStream::w1_scales),
                tensor_scale(problem, TensorStream::w1_scales));
    fill_scales(w.w2_scales, std::size_t(weight_scale_count(problem.scales, E, H, I)), tensor_seed(seed, TensorStream::w2_scales),
                tensor_scale(problem, TensorStream::w2_scales));
    if (tensor_scales(problem.scales)) w.x_scale = {fp8_x_scale(w.fp8_format)};
  } else {
    fill_tensor(w.x, T * H, tensor_seed(seed, TensorStream::x), tensor_scale(problem, TensorStream::x), problem.dtype);
    fill_tensor(w.w1, E * 2 * I * H, tensor_seed(seed, TensorStream::w1), tensor_scale(problem, TensorStream::w1),
                problem.dtype);
    fill_tensor(w.w2, E * H * I, tensor_seed(seed, TensorStream::w2), tensor_scale(problem, TensorStream::w2),
                problem.dtype);
  }
  w.topk_ids = std::move(routed.ids);
  w.topk_weights = std::move(routed.weights);
  if (problem.scales == Scales::static_tensor) w.inter_scale = {calibrated_inter_scale(w)};
  return w;
}

}  // namespace ft
