// The one-launch decode layer (templates/ft/moe_decode.hpp) for sm_90a with a
// deliberately broken hand-over (tests/emu/decode_test.cpp): stage 2 starts
// on an expert once the first of its stage-1 units has arrived instead of all
// of them, so it reads intermediate rows other blocks have not written yet.
#include "ft/kernels.hpp"

namespace {

struct EarlyRelease {
  FT_DEVICE static void wait(const int* arrivals, int) { ft::wait_at_least(arrivals, 1); }
};

}  // namespace

FT_KERNEL(ft::kDecodeThreads, ft_control_decode)(ft::MoeArgs args) { ft::DecodeLayer<ft::Elem::bf16, 8>::run(args); }
FT_KERNEL(ft::kDecodeThreads, ft_mutant_early_release_decode)(ft::MoeArgs args) {
  ft::DecodeLayer<ft::Elem::bf16, 8, EarlyRelease>::run(args);
}
