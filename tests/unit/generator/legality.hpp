#pragma once
// The legality check of the table-driven axis tests (pingpong_axis_test.cpp,
// rebalance_axis_test.cpp, fp8_promote_test.cpp, layer/static_scales_test.cpp): a variant is legal on the
// problem, or refused with a reason that contains `rejection`.
#include <gtest/gtest.h>

#include <string>

#include "generator/space.hpp"
#include "generator/variant.hpp"

namespace ft::test {

// Mixtral 8x7B as an fp8 problem with these scales.
inline Problem fp8_mixtral(Scales scales) {
  Problem p = problem_from_preset("mixtral-8x7b").value();
  p.dtype = DType::e4m3;
  p.scales = scales;
  return p;
}

inline void expect_legality(const Variant& v, const Problem& problem, const char* rejection) {
  const auto why = why_illegal(v, problem);
  if (!rejection) {
    EXPECT_FALSE(why) << v.name() << ": " << *why;
  } else {
    ASSERT_TRUE(why) << v.name() << " is legal";
    EXPECT_NE(why->find(rejection), std::string::npos) << *why;
  }
}

}  // namespace ft::test
