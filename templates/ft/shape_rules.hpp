#pragma once
// Shape facts of the matrix instructions that the host's legality rules read
// too (generator/device_facts.hpp): one home for each.
namespace ft {

// The N values the wgmma atoms issue (atom_wgmma.hpp's FT_WGMMA_ISSUE spells
// out one operand list for each); the wgmma family's legality
// (generator/families/wgmma.cpp) is this function.
FT_HOST_DEVICE constexpr bool wgmma_n_supported(int n) { return n == 32 || n == 64 || n == 128 || n == 256; }

// The registers per lane of a wgmma block whose producer warpgroup gives
// registers to its consumers (the wgmma family's wgmma_regs=rebalance,
// wgmma_gemm.hpp): the launch gives every lane entry = file / threads (one
// block per SM, a multiple of 8); setmaxnreg then leaves the producer
// kProducer and the consumer warpgroups share the rest. The family's
// legality (generator/families/wgmma.cpp) reads the same numbers.
struct RegisterSplit {
  static constexpr int kFile = 65536;  // an sm_90 SM's 32-bit registers
  static constexpr int kProducer = 32;  // addressing: its A-row pointers live in shared memory
  FT_HOST_DEVICE static constexpr int entry(int threads) { return kFile / threads / 8 * 8; }
  FT_HOST_DEVICE static constexpr int consumer(int consumers) {
    const int threads = (consumers + 1) * 128;
    const int c = (entry(threads) * threads - 128 * kProducer) / (128 * consumers) / 8 * 8;
    return c < 256 ? c : 256;
  }
};

}  // namespace ft
