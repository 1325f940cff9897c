// The CPU reference of the layer's backward (measure/workload/backward_reference.hpp):
// every gradient against central finite differences of the forward in double,
// on tiny shapes with ragged and empty experts, -1 and out-of-range ids; the
// fp32 instance against the double one; the forward against the layer reference
// the forward kernels are verified with. d(topk_weights)'s bound
// (routed_weight_terms, routed_weight_tolerance): check-export's failing row,
// and the stage-2 backward's arithmetic on seeded few-pair rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "measure/workload/backward_reference.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/reference.hpp"
#include "measure/workload/workload.hpp"

namespace ft {
namespace {

struct Case {
  const char* name;
  MoeShape shape;
  std::vector<std::int32_t> ids;  // [T, k]
};

// Experts without tokens, -1 slots, a bad id (9), ragged counts per expert.
const Case kCases[] = {
    {"one_pair", {1, 4, 2, 1, 1}, {0}},
    {"ragged_with_empty_expert", {5, 6, 4, 3, 2}, {0, 1, 1, 0, 0, 1, 1, 0, 0, 1}},  // expert 2: no tokens
    {"masked_slots", {4, 5, 3, 4, 2}, {-1, 2, 3, -1, -1, -1, 2, 0}},                 // token 2: no expert at all
    {"bad_id_ignored", {3, 4, 2, 2, 2}, {0, 9, 1, 0, -1, 1}},
    {"top3_skewed", {4, 3, 2, 4, 3}, {3, 3, 3, 3, 3, 3, 0, 3, -1, 3, 1, 3}},  // repeated experts per token too
};

// Deterministic values in (-1, 1) (a small LCG), scaled.
std::vector<double> values(std::size_t n, std::uint32_t seed, double scale) {
  std::vector<double> v(n);
  std::uint32_t s = seed * 2654435761u + 1;
  for (double& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (double(s >> 8) / double(1u << 23) - 1.0);
  }
  return v;
}

MoeInputs<double> inputs(const Case& c) {
  const MoeShape& s = c.shape;
  MoeInputs<double> in;
  in.shape = s;
  in.x = values(std::size_t(s.tokens * s.hidden), 1, 1.0);
  in.w1 = values(std::size_t(s.experts * 2 * s.inter * s.hidden), 2, 1.5 / std::sqrt(double(s.hidden)));
  in.w2 = values(std::size_t(s.experts * s.hidden * s.inter), 3, 1.5 / std::sqrt(double(s.inter)));
  in.weights = values(std::size_t(s.pairs()), 4, 1.0);
  in.ids = c.ids;
  return in;
}

double loss(const MoeInputs<double>& in, const std::vector<double>& dy) {
  const std::vector<double> y = moe_forward(in);
  double l = 0;
  for (std::size_t i = 0; i < y.size(); ++i) l += dy[i] * y[i];
  return l;
}

// Every element of one input tensor: central differences of <dy, y> against the analytic gradient.
void expect_matches_differences(const Case& c, const char* what, std::vector<double> MoeInputs<double>::*tensor,
                                const std::vector<double>& analytic) {
  MoeInputs<double> in = inputs(c);
  const std::vector<double> dy = values(std::size_t(c.shape.tokens * c.shape.hidden), 5, 1.0);
  ASSERT_EQ((in.*tensor).size(), analytic.size()) << what;
  const double eps = 1e-5;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    const double keep = (in.*tensor)[i];
    (in.*tensor)[i] = keep + eps;
    const double up = loss(in, dy);
    (in.*tensor)[i] = keep - eps;
    const double down = loss(in, dy);
    (in.*tensor)[i] = keep;
    const double fd = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic[i], fd, 1e-7 + 1e-6 * std::abs(fd)) << c.name << ": d" << what << "[" << i << "]";
  }
}

class BackwardReference : public testing::TestWithParam<Case> {};

TEST_P(BackwardReference, EveryGradientMatchesFiniteDifferencesOfTheForward) {
  const Case& c = GetParam();
  ASSERT_EQ(c.ids.size(), std::size_t(c.shape.pairs()));
  const MoeInputs<double> in = inputs(c);
  const std::vector<double> dy = values(std::size_t(c.shape.tokens * c.shape.hidden), 5, 1.0);
  const MoeGradients<double> g = moe_backward(in, std::span<const double>(dy));
  expect_matches_differences(c, "x", &MoeInputs<double>::x, g.dx);
  expect_matches_differences(c, "w1", &MoeInputs<double>::w1, g.dw1);
  expect_matches_differences(c, "w2", &MoeInputs<double>::w2, g.dw2);
  expect_matches_differences(c, "topk_weights", &MoeInputs<double>::weights, g.dweights);
}

// A slot without an expert has no intermediate and no gradient; an expert
// without tokens has zero weight gradients (the kernels must write them zero).
TEST_P(BackwardReference, EmptySlotsAndExpertsHaveZeroGradients) {
  const Case& c = GetParam();
  const MoeInputs<double> in = inputs(c);
  const std::vector<double> dy = values(std::size_t(c.shape.tokens * c.shape.hidden), 5, 1.0);
  const MoeGradients<double> g = moe_backward(in, std::span<const double>(dy));
  const MoeShape& s = c.shape;
  std::vector<bool> used(std::size_t(s.experts), false);
  for (long long p = 0; p < s.pairs(); ++p) {
    const int e = c.ids[std::size_t(p)];
    if (e >= 0 && e < s.experts) {
      used[std::size_t(e)] = true;
      continue;
    }
    EXPECT_EQ(g.dweights[std::size_t(p)], 0.0) << c.name << " pair " << p;
    for (long long i = 0; i < 2 * s.inter; ++i) EXPECT_EQ(g.d_gate_up[std::size_t(p * 2 * s.inter + i)], 0.0);
  }
  for (long long e = 0; e < s.experts; ++e) {
    if (used[std::size_t(e)]) continue;
    for (long long i = 0; i < 2 * s.inter * s.hidden; ++i) EXPECT_EQ(g.dw1[std::size_t(e * 2 * s.inter * s.hidden + i)], 0.0);
    for (long long i = 0; i < s.hidden * s.inter; ++i) EXPECT_EQ(g.dw2[std::size_t(e * s.hidden * s.inter + i)], 0.0);
  }
}

// The fp32 instance (the verification reference) against the double one.
TEST_P(BackwardReference, Fp32AgreesWithDouble) {
  const Case& c = GetParam();
  const MoeInputs<double> in = inputs(c);
  MoeInputs<float> inf;
  inf.shape = in.shape;
  inf.ids = in.ids;
  auto narrow = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  inf.x = narrow(in.x);
  inf.w1 = narrow(in.w1);
  inf.w2 = narrow(in.w2);
  inf.weights = narrow(in.weights);
  const std::vector<double> dy = values(std::size_t(c.shape.tokens * c.shape.hidden), 5, 1.0);
  const std::vector<float> dyf = narrow(dy);
  const MoeGradients<double> g = moe_backward(in, std::span<const double>(dy));
  const MoeGradients<float> gf = moe_backward(inf, std::span<const float>(dyf));
  auto expect_close = [&](const std::vector<double>& a, const std::vector<float>& b, const char* what) {
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(double(b[i]), a[i], 1e-5 * (1 + std::abs(a[i]))) << what << i;
  };
  expect_close(g.dx, gf.dx, "dx");
  expect_close(g.dw1, gf.dw1, "dw1");
  expect_close(g.dw2, gf.dw2, "dw2");
  expect_close(g.dweights, gf.dweights, "dweights");
}

INSTANTIATE_TEST_SUITE_P(Shapes, BackwardReference, testing::ValuesIn(kCases),
                         [](const testing::TestParamInfo<Case>& i) { return std::string(i.param.name); });

// The forward of the backward reference is the layer the forward kernels are
// held to: against reference_layer on a seeded bf16 workload with an empty
// expert (which rounds the intermediate to bf16: a relative L2 near 2^-9).
TEST(BackwardReferenceForward, AgreesWithTheLayerReference) {
  Problem p;
  p.name = "tiny";
  p.experts = 4;
  p.hidden = 64;
  p.inter = 64;
  p.topk = 2;
  p.routing = *Routing::parse("uniform");
  WorkloadOptions o;
  o.empty_experts = 1;
  auto w = make_workload(p, 13, o);
  ASSERT_TRUE(w) << w.error().describe();
  const std::vector<float> y = moe_forward(decoded_inputs(*w));
  const ReferenceOutput ref = reference_layer(*w);
  ASSERT_EQ(y.size(), ref.y.size());
  double err = 0, norm = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    err += (double(y[i]) - ref.y[i]) * (double(y[i]) - ref.y[i]);
    norm += double(ref.y[i]) * ref.y[i];
  }
  ASSERT_GT(norm, 0);
  EXPECT_LT(std::sqrt(err / norm), 8e-3);
}

// The terms of dw_p = sum_i C_i h_i, C = W2_e^T dY_t: by hand on one expert,
// H = 2, I = 2; a -1 slot and a bad id have none.
TEST(RoutedWeightTerms, NormOfTheProductsTheDotSums) {
  MoeInputs<float> in;
  in.shape = {1, 2, 2, 1, 3};
  in.w2 = {1, 2, 3, 4};  // W2_0 [H, I]: C = W2^T dy = (1 * 1 + 3 * -1, 2 * 1 + 4 * -1) = (-2, -2)
  in.ids = {0, -1, 7};
  in.weights = {0.5f, 0.25f, 0.25f};
  const std::vector<float> dy = {1, -1}, h = {3, -4, 5, 6, 7, 8};
  const std::vector<float> t = routed_weight_terms(in, dy, h);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_FLOAT_EQ(t[0], 10.0f);  // |(-6, 8)|
  EXPECT_EQ(t[1], 0.0f);
  EXPECT_EQ(t[2], 0.0f);
}

// check-export's failing row (search --emulate --target sm_90a, E6 H64 I128
// k2, --space small --budget 2 --seed 42; its backward at T = 7, masked
// routing): five routed pairs, the wgmma stage-2 backward's d(topk_weights)
// against dY . W2_e h with h as the forward stored it, and the pairs' terms.
// compare.hpp's plain bound fails it (8.10e-3 > 8e-3); the kernel equals its
// own formula (h = silu(g) u from the stored g, u) within 3e-7.
TEST(RoutedWeightTolerance, HoldsCheckExportsMaskedRowAtSevenTokens) {
  const std::vector<float> got = {0, -0.996859729f, 0, 0, -1.23896086f, 0, 0, 0, 0, -2.37437701f, 4.98594761f, 0, 2.80845332f, 0};
  const std::vector<float> ref = {0, -0.988942504f, 0, 0, -1.25823534f, 0, 0, 0, 0, -2.37061644f, 4.93899918f, 0, 2.80935836f, 0};
  const std::vector<float> terms = {0, 3.73098705f, 0, 0, 6.04454514f, 0, 0, 0, 0, 3.29349882f, 10.3869106f, 0, 2.51989395f, 0};
  const Comparison plain = compare_values(got, ref, tolerance_for(DType::bf16));
  EXPECT_FALSE(plain.passed) << plain.summary();
  EXPECT_NEAR(plain.rel_l2, 8.10e-3, 0.01e-3);
  const Tolerance tol = routed_weight_tolerance(DType::bf16, ref, terms);
  const Comparison c = compare_values(got, ref, tol);
  EXPECT_TRUE(c.passed) << c.summary();
  EXPECT_LT(c.rel_l2, tol.rel_l2 / 3) << c.summary();  // 8.1e-3 against 2.9e-2: the row is not marginal
  // Still fails a pair 3% off, two pairs swapped, a pair dropped.
  for (auto mutate : std::vector<std::function<void(std::vector<float>&)>>{
           [](std::vector<float>& v) { v[10] *= 1.03f; }, [](std::vector<float>& v) { std::swap(v[9], v[12]); },
           [](std::vector<float>& v) { v[4] = 0; }}) {
    std::vector<float> bad = got;
    mutate(bad);
    EXPECT_FALSE(compare_values(bad, ref, tol).passed) << compare_values(bad, ref, tol).summary();
  }
}

// The stage-2 backward's d(topk_weights) on the CPU, as its epilogue computes
// it (moe_dgrad.hpp, swiglu_grad: C . silu(g) u with g, u the stored 16-bit
// pre-activations, fp32 sums), on seeded bf16 rows of few pairs (E6 H64 I128
// k2, masked as check-export masks: experts 3..5 -> -1, T = 1, 2, 7): within
// routed_weight_tolerance against both references -- check-export's (h as
// stored) and the search's (the fp32 backward) -- on every row, while
// compare.hpp's plain bound fails some rows; the routed weight applied to it
// fails every row, a 3% scale three rows in four (not where a sum cancels).
TEST(RoutedWeightTolerance, HoldsTheStage2BackwardsRoundingOnFewPairs) {
  const DType d = DType::bf16;
  Problem prob;
  prob.name = "dtopk";
  prob.experts = 6, prob.hidden = 64, prob.inter = 128, prob.topk = 2;
  prob.routing = *Routing::parse("uniform");
  const long long H = prob.hidden, I = prob.inter;
  int rows = 0, plain_failures = 0, scaled_failures = 0;
  for (int tokens : {1, 2, 7})
    for (std::uint64_t seed = 1; seed <= 40; ++seed) {
      WorkloadOptions o;
      o.seed = seed;
      auto w = make_workload(prob, tokens, o);
      ASSERT_TRUE(w) << w.error().describe();
      for (std::int32_t& id : w->topk_ids)
        if (id >= 3) id = -1;
      MoeInputs<float> in = decoded_inputs(*w);
      if (std::ranges::none_of(in.ids, [](std::int32_t id) { return id >= 0; })) continue;
      std::vector<float> dy(std::size_t(tokens * H));
      for (std::size_t i = 0; i < dy.size(); ++i) dy[i] = half_to_f32(d, f32_to_half(d, random_normal(seed * 31 + 5, i)));
      const MoeGradients<float> ref = moe_backward(in, std::span<const float>(dy));
      auto round = [&](float v) { return half_to_f32(d, f32_to_half(d, v)); };
      std::vector<float> h(ref.inter.size());
      for (std::size_t i = 0; i < h.size(); ++i) h[i] = round(ref.inter[i]);
      std::vector<float> kernel(std::size_t(in.shape.pairs()), 0.0f), stored(kernel.size(), 0.0f);
      for (long long p = 0; p < in.shape.pairs(); ++p) {
        const long long e = in.ids[std::size_t(p)];
        if (e < 0) continue;
        float dw = 0, dw_stored = 0;
        for (long long i = 0; i < I; ++i) {
          float c = 0;  // C_i, an fp32 sum as the GEMM's
          for (long long r = 0; r < H; ++r) c += in.w2[std::size_t((e * H + r) * I + i)] * dy[std::size_t(p / prob.topk * H + r)];
          const float g = round(ref.gate_up[std::size_t(p * 2 * I + i)]), u = round(ref.gate_up[std::size_t(p * 2 * I + I + i)]);
          dw += c * g * (1.0f / (1.0f + std::exp(-g))) * u;
          dw_stored += c * h[std::size_t(p * I + i)];
        }
        kernel[std::size_t(p)] = dw, stored[std::size_t(p)] = dw_stored;
      }
      ++rows;
      const Tolerance tol_stored = routed_weight_tolerance(d, stored, routed_weight_terms(in, dy, h));
      const Tolerance tol_fp32 = routed_weight_tolerance(d, ref.dweights, routed_weight_terms(in, dy, ref.inter));
      const std::string row = "T=" + std::to_string(tokens) + " seed " + std::to_string(seed);
      EXPECT_TRUE(compare_values(kernel, stored, tol_stored).passed) << row << ": " << compare_values(kernel, stored, tol_stored).summary();
      EXPECT_TRUE(compare_values(kernel, ref.dweights, tol_fp32).passed) << row << ": " << compare_values(kernel, ref.dweights, tol_fp32).summary();
      plain_failures += !compare_values(kernel, stored, tolerance_for(d)).passed;
      std::vector<float> scaled = kernel, weighted = kernel;
      for (float& v : scaled) v *= 1.03f;
      for (std::size_t p = 0; p < weighted.size(); ++p) weighted[p] *= in.weights[p];  // the routed weight applied (dh's C)
      scaled_failures += !compare_values(scaled, stored, tol_stored).passed;
      EXPECT_FALSE(compare_values(weighted, stored, tol_stored).passed) << row << ": " << compare_values(weighted, stored, tol_stored).summary();
    }
  std::printf("%d rows: plain bound failed %d, 3%% scale failed %d\n", rows, plain_failures, scaled_failures);
  EXPECT_GT(rows, 100);
  EXPECT_GT(scaled_failures, rows * 3 / 4);
  EXPECT_GT(plain_failures, 0) << "the plain bound no longer fails a few-pair row: is routed_weight_tolerance still needed?";
}

}  // namespace
}  // namespace ft
