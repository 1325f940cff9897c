#include "measure/workload/compare.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "measure/workload/half.hpp"

namespace ft {

Tolerance tolerance_for(DType d) {
  if (d == DType::bf16) return {8e-3, 0x1.0p-5, 0x1.0p-7};
  return {1e-3, 0x1.0p-8, 0x1.0p-10};
}

Comparison compare_output(std::span<const std::uint16_t> got, std::span<const float> ref, DType dtype) {
  return compare_output(got, ref, dtype, tolerance_for(dtype));
}

Comparison compare_output(std::span<const std::uint16_t> got, std::span<const float> ref, DType dtype, const Tolerance& tol) {
  Comparison c;
  c.tolerance = tol;
  c.count = std::min(got.size(), ref.size());
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < c.count; ++i) {
    const double y = half_to_f32(dtype, got[i]);
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
  }
  c.rel_l2 = ref2 > 0 ? std::sqrt(err2 / ref2) : std::sqrt(err2);
  c.max_abs_bound = tol.max_rel * c.ref_max_abs + tol.max_abs_floor;
  c.passed = got.size() == ref.size() && c.count > 0 && c.nonfinite == 0 && c.rel_l2 <= tol.rel_l2 &&
             c.max_abs <= c.max_abs_bound;
  return c;
}

std::string Comparison::summary(std::size_t row_length) const {
  auto where = [&](std::size_t i) {
    return row_length ? fmt::format("[{}, {}]", i / row_length, i % row_length) : fmt::format("[{}]", i);
  };
  if (count == 0) return "no elements compared (output and reference sizes differ or are empty)";
  if (nonfinite > 0) return fmt::format("{} NaN/Inf element{} of {}, first at {}", nonfinite, nonfinite == 1 ? "" : "s", count,
                                        where(first_nonfinite));
  return fmt::format("rel L2 {:.2e} (bound {:.1e}), max |err| {:.2e} at {} (bound {:.2e})", rel_l2, tolerance.rel_l2, max_abs,
                     where(worst), max_abs_bound);
}

}  // namespace ft
