#pragma once
// Comparing a kernel's output with the reference.
//
// Bounds. The reference is computed in fp32 from the same 16-bit inputs and
// rounds stage 1's output like the kernels, so what remains is the output
// rounding (half an ulp: 2^-9 relative for bf16, 2^-12 for f16), the order of
// fp32 sums (atomics, split-K, tile order) and rare one-ulp flips of stage-1
// values that sit on a rounding boundary. Measured on the emulator these give a
// relative L2 error near 0.4 ulp (1.7e-3 bf16, 2.1e-4 f16 at E=4, H=256, I=512); the bounds leave a wide margin while any
// indexing or layout error (relative L2 ~ 1) fails by orders of magnitude:
//   bf16: relative L2 <= 8e-3,  max |error| <= 2^-5 * max|reference| (+ 2^-7 absolute floor)
//   f16:  relative L2 <= 1e-3,  max |error| <= 2^-8 * max|reference| (+ 2^-10 absolute floor)
// Any NaN or Inf in the output fails, so a poisoned (NaN) element that no
// kernel wrote fails too.
//
// fp8 layers (DType::e4m3: Y and partials are bf16) are held to the fp8 GEMMs'
// usual check, diff = 1 - 2<y, ref> / (|y|^2 + |ref|^2) <= 1e-3 against the fp32
// reference from the dequantised inputs, plus loose L2 and max bounds: the
// reference quantises X and the intermediate by the layer's own rules, so what
// remains is sum order, the bf16 rounding of a bf16-stored intermediate before
// quantise_inter (which moves a few percent of its codes by one step, 6-12% of
// that value) and the output rounding: rel L2 <= 4e-2, max |error| <= 2^-2 *
// max|reference| (+ 2^-7). A wrong scale index changes whole groups by the
// inputs' magnitudes (0.25 .. 4): diff of order 1e-2 and more.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "generator/problem.hpp"

namespace ft {

struct Tolerance {
  double rel_l2 = 0;   // ||y - ref|| / ||ref||
  double max_rel = 0;  // max |y - ref| <= max_rel * max |ref| + max_abs_floor
  double max_abs_floor = 0;
  double max_diff = 1.0;  // 1 - 2<y, ref> / (|y|^2 + |ref|^2); 1: not checked (16-bit layers)
};
Tolerance tolerance_for(DType d);
// An fp8 layer against the bf16 layer on the same dequantised weights (X and
// the intermediate unquantised): a loose bound that the quantisation error of
// e4m3 activations stays within, and a layer whose activations saturate or
// vanish (a wrong activation scale that the fp8 reference shares) does not.
Tolerance fp8_sanity_tolerance();

struct Comparison {
  std::size_t count = 0;
  std::size_t nonfinite = 0;       // NaN or Inf elements in the output
  std::size_t first_nonfinite = 0;
  double rel_l2 = 0;
  double max_abs = 0;              // largest |y - ref| over finite elements
  std::size_t worst = 0;           // where it is
  double ref_max_abs = 0;
  double max_abs_bound = 0;        // the bound max_abs was held to
  double diff = 0;                 // 1 - 2<y, ref> / (|y|^2 + |ref|^2), reported for every layer
  Tolerance tolerance;
  bool passed = false;
  // fp8 layers: the summary of the comparison with the bf16 layer (fp8_sanity_tolerance), when one was made
  // (with_sanity); empty otherwise.
  std::string sanity;
  // "rel L2 1.2e-03 (bound 8.0e-03), max |err| 3.1e-03 at [5, 17] (bound 4.1e-02)"
  // or "12 NaN/Inf elements, first at [0, 3]"; `row_length` splits flat indices.
  std::string summary(std::size_t row_length = 0) const;
};

// `c` held to the sanity comparison too: passes when both do; its summary names both.
Comparison with_sanity(Comparison c, const Comparison& against_bf16_layer, std::size_t row_length = 0);

// `got`: 16-bit output bits of `dtype`; `ref`: the fp32 reference.
Comparison compare_output(std::span<const std::uint16_t> got, std::span<const float> ref, DType dtype);
Comparison compare_output(std::span<const std::uint16_t> got, std::span<const float> ref, DType dtype, const Tolerance& tol);
// fp32 values against the reference (dequantised fp8 intermediates).
Comparison compare_values(std::span<const float> got, std::span<const float> ref, const Tolerance& tol);

}  // namespace ft
