#pragma once
// A covering sample of a variant space: a few legal variants in which every
// value of every axis, and every pair of values of two axes, that the space's
// legal variants take (per family and stage role) appears at least once. The
// compile suite builds this sample in CI instead of every variant (ctest label
// `fullspace` builds the whole space; docs/PERFORMANCE.md's CI budget).
#include <cstddef>
#include <span>
#include <vector>

#include "generator/variant.hpp"

namespace ft {

// What a sample must cover: each (family, stage role, axis, value) of an axis
// present in a legal variant, and each (family, role, axis a, value, axis b,
// value) of two axes present in the same legal variant. (Pairs count only
// axes that take two values or more in the family and role's legal variants:
// with a fixed axis, a pair is the other axis's value.)
struct SampleCoverage {
  std::size_t values = 0;  // distinct (family, role, axis, value) to cover
  std::size_t pairs = 0;   // distinct value pairs of two axes to cover
};
SampleCoverage coverage_of(std::span<const Variant> legal);

// The sample of `legal` (a space's legal variants, in enumeration order):
// greedy set cover -- each pick is the variant that adds the most uncovered
// values and pairs, the earliest on ties -- so the same space gives the same
// sample. The picks keep `legal`'s order. Every value and pair coverage_of
// counts appears in it.
std::vector<Variant> covering_sample(std::span<const Variant> legal);

}  // namespace ft
