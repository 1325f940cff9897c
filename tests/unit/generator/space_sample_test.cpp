#include "generator/space_sample.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "generator/space.hpp"

namespace ft {
namespace {

Problem mixtral(DType dtype = DType::bf16, Scales scales = Scales::per_tensor) {
  Problem p = *problem_from_preset("mixtral-8x7b");
  p.dtype = dtype;
  if (dtype == DType::e4m3) p.scales = scales;
  return p;
}

using Value = std::tuple<std::string, int, std::string, AxisValue>;  // family, role, axis key, value
using Pair = std::tuple<std::string, int, std::string, AxisValue, std::string, AxisValue>;

// What a set of variants shows of each axis, counted here without the sampler's code: every value of
// every axis present in a variant (values_in), and every two axes' values together (pairs_in: only axes
// that take two values or more in the space's variants of the family and role, `all_values`).
std::set<Value> values_in(std::span<const Variant> vs) {
  std::set<Value> out;
  for (const Variant& v : vs)
    for (std::size_t i = 0; i < v.family->axes().size(); ++i)
      if (v.family->axes()[i].present_in(v))
        out.insert({std::string(v.family->id()), int(v.role), std::string(v.family->axes()[i].key), v.values[i]});
  return out;
}

std::set<Pair> pairs_in(std::span<const Variant> vs, const std::set<Value>& all_values) {
  std::map<std::tuple<std::string, int, std::string>, int> count;
  for (const auto& [f, r, k, x] : all_values) ++count[{f, r, k}];
  auto varies = [&](const Variant& v, std::size_t i) {
    return count[{std::string(v.family->id()), int(v.role), std::string(v.family->axes()[i].key)}] > 1;
  };
  std::set<Pair> out;
  for (const Variant& v : vs) {
    const auto axes = v.family->axes();
    for (std::size_t i = 0; i < axes.size(); ++i)
      for (std::size_t j = i + 1; j < axes.size(); ++j)
        if (axes[i].present_in(v) && axes[j].present_in(v) && varies(v, i) && varies(v, j))
          out.insert({std::string(v.family->id()), int(v.role), std::string(axes[i].key), v.values[i],
                      std::string(axes[j].key), v.values[j]});
  }
  return out;
}

struct SampleCase {
  const char* target;
  DType dtype;
  Scales scales;
  const char* space;
  int at_most_percent;  // the sample's size, at most this share of the space (100: the small AMD fp8 spaces, 9
                        // variants, need nearly all of them)
};

class CoveringSample : public ::testing::TestWithParam<SampleCase> {};

TEST_P(CoveringSample, CoversEveryAxisValueAndPairInAFewLegalVariants) {
  const SampleCase& c = GetParam();
  const Problem problem = mixtral(c.dtype, c.scales);
  Space space = enumerate_space(*find_target(c.target), problem, SpaceOptions::parse(c.space).value());
  ASSERT_FALSE(space.legal.empty());
  std::vector<Variant> sample = covering_sample(space.legal);

  // Legal variants of the space, each once, in the space's order.
  std::vector<std::string> names;
  for (const Variant& v : space.legal) names.push_back(v.name());
  std::size_t at = 0;
  for (const Variant& v : sample) {
    auto it = std::find(names.begin() + long(at), names.end(), v.name());
    ASSERT_NE(it, names.end()) << v.name() << " is not in the space, or out of order";
    at = std::size_t(it - names.begin()) + 1;
    EXPECT_FALSE(why_illegal(v, problem)) << v.name();
  }

  const auto all_values = values_in(space.legal);
  const auto sample_values = values_in(sample);
  for (const auto& [family, role, key, value] : all_values)
    EXPECT_TRUE(sample_values.contains({family, role, key, value}))
        << c.target << " " << family << " role " << role << ": " << key << " = " << value << " is in no sampled variant";
  const auto all_pairs = pairs_in(space.legal, all_values);
  const auto sample_pairs = pairs_in(sample, all_values);
  for (const auto& p : all_pairs)
    EXPECT_TRUE(sample_pairs.contains(p)) << c.target << " " << std::get<0>(p) << " role " << std::get<1>(p) << ": "
                                          << std::get<2>(p) << " = " << std::get<3>(p) << " with " << std::get<4>(p)
                                          << " = " << std::get<5>(p) << " is in no sampled variant";
  const SampleCoverage counted = coverage_of(space.legal);
  EXPECT_EQ(counted.values, all_values.size());
  EXPECT_EQ(counted.pairs, all_pairs.size());

  EXPECT_LE(sample.size() * 100, space.legal.size() * std::size_t(c.at_most_percent))
      << sample.size() << " of " << space.legal.size() << " variants";
  RecordProperty("sampled", fmt::format("{} of {}", sample.size(), space.legal.size()));

  // The same space, the same sample.
  std::vector<Variant> again = covering_sample(space.legal);
  EXPECT_TRUE(again == sample);
}

// Measured 2026-12-07: sm_90a default 50 of 649, gfx942 and gfx90a 20 of 103, gfx950 30 of 252; the small fp8
// spaces: sm_90a per-tensor 23 of 66, block128 19 of 30, gfx950 and gfx942 per-token 8 of 9; sm_90a wide 131 of
// 28408.
INSTANTIATE_TEST_SUITE_P(
    Spaces, CoveringSample,
    ::testing::Values(SampleCase{"sm_90a", DType::bf16, Scales::per_tensor, "default", 10},
                      SampleCase{"gfx942", DType::bf16, Scales::per_tensor, "default", 25},
                      SampleCase{"gfx90a", DType::bf16, Scales::per_tensor, "default", 25},
                      SampleCase{"gfx950", DType::bf16, Scales::per_tensor, "default", 15},
                      SampleCase{"sm_90a", DType::e4m3, Scales::per_tensor, "small", 40},
                      SampleCase{"sm_90a", DType::e4m3, Scales::block128, "small", 70},
                      SampleCase{"gfx950", DType::e4m3, Scales::per_token, "small", 100},
                      SampleCase{"gfx942", DType::e4m3, Scales::per_token, "small", 100},
                      SampleCase{"sm_90a", DType::bf16, Scales::per_tensor, "wide", 1}),
    [](const auto& info) {
      return fmt::format("{}_{}_{}_{}", info.param.target, to_string(info.param.dtype), info.param.space, info.index);
    });

TEST(CoveringSample, KeepsALoneVariantAndTakesNothingFromNothing) {
  const Target& gfx942 = *find_target("gfx942");
  Space space = enumerate_space(gfx942, mixtral(), SpaceOptions::parse("small;kind=moe1;tile_m=64").value());
  ASSERT_FALSE(space.legal.empty());
  const std::vector<Variant> one{space.legal.front()};
  EXPECT_TRUE(covering_sample(one) == one);
  EXPECT_TRUE(covering_sample(std::span<const Variant>{}).empty());
  // Two variants that differ in one axis: both are needed for its two values.
  Space two = enumerate_space(gfx942, mixtral(),
                              SpaceOptions::parse("small;kind=moe1;atom=mfma_f32_16x16x16_bf16;tile_m=32,64").value());
  ASSERT_EQ(two.legal.size(), 2u);
  EXPECT_EQ(covering_sample(two.legal).size(), 2u);
}

}  // namespace
}  // namespace ft
