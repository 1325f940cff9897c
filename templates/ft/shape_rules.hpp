#pragma once
// Shape facts of the matrix instructions that the host's legality rules read
// too (generator/device_facts.hpp): one home for each.
namespace ft {

// The N values the wgmma atoms issue (atom_wgmma.hpp's FT_WGMMA_ISSUE spells
// out one operand list for each); the wgmma family's legality
// (generator/families/wgmma.cpp) is this function.
FT_HOST_DEVICE constexpr bool wgmma_n_supported(int n) { return n == 32 || n == 64 || n == 128 || n == 256; }

}  // namespace ft
