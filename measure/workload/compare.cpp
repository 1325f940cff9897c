#include "measure/workload/compare.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "measure/workload/half.hpp"

namespace ft {

Tolerance tolerance_for(DType d) {
  if (d == DType::bf16) return {8e-3, 0x1.0p-5, 0x1.0p-7};
  if (d == DType::e4m3) return {4e-2, 0x1.0p-2, 0x1.0p-7, 1e-3};
  return {1e-3, 0x1.0p-8, 0x1.0p-10};
}

Tolerance fp8_sanity_tolerance() { return {0.15, 1.0, 0x1.0p-7, 1e-2}; }

Comparison compare_output(std::span<const std::uint16_t> got, std::span<const float> ref, DType dtype) {
  return compare_output(got, ref, dtype, tolerance_for(dtype));
}

namespace {

template <class Value>
Comparison compare_with(std::size_t size, std::span<const float> ref, const Tolerance& tol, Value value) {
  Comparison c;
  c.tolerance = tol;
  c.count = std::min(size, ref.size());
  double err2 = 0, ref2 = 0, dot = 0, got2 = 0;
  for (std::size_t i = 0; i < c.count; ++i) {
    const double y = value(i);
    const double r = ref[i];
    c.ref_max_abs = std::max(c.ref_max_abs, std::abs(r));
    if (!std::isfinite(y)) {
      if (c.nonfinite++ == 0) c.first_nonfinite = i;
      continue;
    }
    const double e = std::abs(y - r);
    if (e > c.max_abs) {
      c.max_abs = e;
      c.worst = i;
    }
    err2 += e * e;
    ref2 += r * r;
    dot += y * r;
    got2 += y * y;
  }
  c.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  // Both all zero: identical (0); one of them zero: 1.
  c.diff = got2 + ref2 > 0 ? 1.0 - 2.0 * dot / (got2 + ref2) : 0.0;
  c.max_abs_bound = tol.max_rel * c.ref_max_abs + tol.max_abs_floor;
  c.passed = size == ref.size() && c.count > 0 && c.nonfinite == 0 && c.rel_l2 <= tol.rel_l2 &&
             c.max_abs <= c.max_abs_bound && (tol.max_diff >= 1.0 || c.diff <= tol.max_diff);
  return c;
}

}  // namespace

Comparison compare_output(std::span<const std::uint16_t> got, std::span<const float> ref, DType dtype, const Tolerance& tol) {
  return compare_with(got.size(), ref, tol, [&](std::size_t i) { return double(half_to_f32(dtype, got[i])); });
}

Comparison compare_values(std::span<const float> got, std::span<const float> ref, const Tolerance& tol) {
  return compare_with(got.size(), ref, tol, [&](std::size_t i) { return double(got[i]); });
}

std::string Comparison::summary(std::size_t row_length) const {
  auto where = [&](std::size_t i) {
    return row_length ? fmt::format("[{}, {}]", i / row_length, i % row_length) : fmt::format("[{}]", i);
  };
  if (count == 0) return "no elements compared (output and reference sizes differ or are empty)";
  if (nonfinite > 0) return fmt::format("{} NaN/Inf element{} of {}, first at {}", nonfinite, nonfinite == 1 ? "" : "s", count,
                                        where(first_nonfinite));
  const std::string base = fmt::format("rel L2 {:.2e} (bound {:.1e}), max |err| {:.2e} at {} (bound {:.2e})", rel_l2,
                                       tolerance.rel_l2, max_abs, where(worst), max_abs_bound);
  if (tolerance.max_diff >= 1.0) return base;  // 16-bit layers: as before
  const std::string fp8 = fmt::format("diff {:.2e} (bound {:.0e}), {}", diff, tolerance.max_diff, base);
  return sanity.empty() ? fp8 : fp8 + "; against the bf16 layer: " + sanity;
}

Comparison with_sanity(Comparison c, const Comparison& against_bf16_layer, std::size_t row_length) {
  c.passed = c.passed && against_bf16_layer.passed;
  c.sanity = against_bf16_layer.summary(row_length) + (against_bf16_layer.passed ? "" : " (FAILED)");
  return c;
}

}  // namespace ft
