#pragma once
// One matrix atom on one operand pair, on any Device: the host side of the
// probe kernels in tests/emu/units/atom_probe.cpp (entry ft_probe_<atom id>,
// one wave / warp, or one warpgroup for wgmma atoms; argument {a, b, c_in, c_out}). Used to check the emulated
// atoms against a plain CPU matmul, and the emulator against the hardware.
#include <cstdint>
#include <string>
#include <vector>

#include "generator/atoms.hpp"
#include "device/device.hpp"

namespace ft {

// Warpgroup (wgmma) atoms are probed at N = 64, from a swizzled shared-memory
// tile of 128 rows x 128 bytes (plus room to align it to 1024 bytes).
inline constexpr int kWgmmaProbeN = 64;
inline constexpr int kWgmmaProbeSharedBytes = 128 * 128 + 1024;

struct AtomProbeInputs {
  int m = 0, n = 0, k = 0;
  Elem operand = Elem::bf16;     // the element type of a and b (the atom row's)
  std::vector<std::uint8_t> a;   // [M, K] elements of `operand`, raw little-endian bytes
  std::vector<std::uint8_t> b;   // [N, K]
  std::vector<float> c_in;       // [M, N]

  float a_at(int row, int kk) const;  // decoded as `operand`
  float b_at(int col, int kk) const;
};

// exact: small values whose every partial sum is exact in fp32, so any
// summation order gives the same bits -- the inputs for comparing with hardware
// bitwise (integers |a|, |b| <= 3, |c| <= 8; for e4m3, A also holds +-max, the
// code a saturated value encodes to, and -0 on OCP, every partial sum staying
// below 2^13). Otherwise random values of both signs across the type's range:
// N(0, 1) for 16-bit types; for e4m3, N(0, max / 4) with every 11th value of A
// and B a saturating one (+-4 max) and every 7th a subnormal; N(0, 1)
// accumulators. Operands are encoded by the kernels' own conversions
// (templates/ft/numeric.hpp: rounded to nearest even, fp8 saturated).
AtomProbeInputs make_atom_probe_inputs(const AtomInfo& atom, std::uint64_t seed, bool exact);

// c_in + A B^T with exact products and fp32 sums in k order (the emulated
// instruction's arithmetic), the operands decoded as in.operand.
std::vector<float> atom_probe_expected(const AtomProbeInputs& in);

std::string atom_probe_entry(const AtomInfo& atom);  // "ft_probe_<id>"

// Uploads the operands, launches `probe` with one wave / warp (a warpgroup and
// its shared memory for wgmma atoms), returns C [M, N].
Result<std::vector<float>> run_atom_probe(Device& device, FunctionHandle probe, const AtomInfo& atom,
                                          const AtomProbeInputs& in);

// The share of `got`'s values whose bits differ from `want`'s (a NaN where a
// number belongs counts as different): how a mutant probe is judged.
double fraction_differing(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace ft
