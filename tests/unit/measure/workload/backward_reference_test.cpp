// The CPU reference of the layer's backward (measure/workload/backward_reference.hpp):
// every gradient against central finite differences of the forward in double,
// on tiny shapes with ragged and empty experts, -1 and out-of-range ids; the
// fp32 instance against the double one; the forward against the layer reference
// the forward kernels are verified with.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "measure/workload/backward_reference.hpp"
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

}  // namespace
}  // namespace ft
