#pragma once
// One matrix atom on one operand pair, on any Device: the host side of the
// probe kernels in tests/emu/units/atom_probe.cpp (entry ft_probe_<atom id>,
// one wave / warp, or one warpgroup for wgmma atoms; argument {a, b, c_in, c_out}). Used to check the emulated
// atoms against a plain CPU matmul, and the emulator against the hardware.
#include <cstdint>
#include <string>
#include <vector>

#include "generator/atoms.hpp"
#include "tuner/device/device.hpp"

namespace ft {

// Warpgroup (wgmma) atoms are probed at N = 64, from a swizzled shared-memory
// tile of 128 rows x 128 bytes (plus room to align it to 1024 bytes).
inline constexpr int kWgmmaProbeN = 64;
inline constexpr int kWgmmaProbeSharedBytes = 128 * 128 + 1024;

struct AtomProbeInputs {
  int m = 0, n = 0, k = 0;
  DType dtype = DType::bf16;
  std::vector<std::uint16_t> a;  // [M, K]
  std::vector<std::uint16_t> b;  // [N, K]
  std::vector<float> c_in;       // [M, N]
};

// exact: small integers (|a|, |b| <= 3, |c| <= 8), so every partial sum is
// exact in fp32 and any summation order gives the same bits -- the inputs for
// comparing with hardware bitwise. Otherwise N(0, 1) values (rounded to the
// 16-bit type) and N(0, 1) accumulators.
AtomProbeInputs make_atom_probe_inputs(const AtomInfo& atom, std::uint64_t seed, bool exact);

// c_in + A B^T with exact products and fp32 sums in k order (the emulated
// instruction's arithmetic).
std::vector<float> atom_probe_expected(const AtomProbeInputs& in);

std::string atom_probe_entry(const AtomInfo& atom);  // "ft_probe_<id>"

// Uploads the operands, launches `probe` with one wave / warp (a warpgroup and
// its shared memory for wgmma atoms), returns C [M, N].
Result<std::vector<float>> run_atom_probe(Device& device, FunctionHandle probe, const AtomInfo& atom,
                                          const AtomProbeInputs& in);

}  // namespace ft
