// One matrix atom on a single M x K by N x K operand pair, fragments loaded and
// stored by the atom's own lane layout (templates/ft/atom_layouts.hpp). Compiles
// for the emulator and for the GPU flavours, so the emulator's result can be
// compared with the hardware's (tests/emu/atom_test.cpp; the H200 cross-check).
#include "ft/kernels.hpp"

struct AtomProbeArgs {
  const ft::u16* a;   // [M, K]
  const ft::u16* b;   // [N, K]
  const float* c_in;  // [M, N]
  float* c_out;       // [M, N]
};

template <class Atom>
FT_DEVICE void atom_probe(const AtomProbeArgs& p) {
  const int lane = ft::thread_index() % Atom::lanes;
  ft::u16 a[Atom::a_regs], b[Atom::b_regs];
  float c[Atom::c_regs];
  for (int i = 0; i < Atom::a_regs; ++i) a[i] = p.a[Atom::a_row(lane, i) * Atom::K + Atom::a_k(lane, i)];
  for (int i = 0; i < Atom::b_regs; ++i) b[i] = p.b[Atom::b_col(lane, i) * Atom::K + Atom::b_k(lane, i)];
  for (int i = 0; i < Atom::c_regs; ++i) c[i] = p.c_in[Atom::c_row(lane, i) * Atom::N + Atom::c_col(lane, i)];
  Atom::mma(c, a, b);
  for (int i = 0; i < Atom::c_regs; ++i) p.c_out[Atom::c_row(lane, i) * Atom::N + Atom::c_col(lane, i)] = c[i];
}

#define FT_PROBE(id) \
  FT_KERNEL(ft::atom::id::lanes, ft_probe_##id)(AtomProbeArgs p) { atom_probe<ft::atom::id>(p); }

#if defined(FT_FLAVOUR_CUDA) || (defined(FT_FLAVOUR_EMU) && FT_EMU_WAVE_SIZE == 32)
FT_PROBE(mma_m16n8k16_f32_bf16)
FT_PROBE(mma_m16n8k16_f32_f16)

// A mutant: its A layout sends k 0-1 to the lanes that should hold k 2-3 (and
// so on). The instruction keeps its true layout (mma's Self is the base atom),
// so the operands the probe loads disagree with what the instruction reads.
struct broken_mma : ft::atom::mma_m16n8k16_f32_bf16 {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return 2 * ((l + 1) & 3) + (i & 1) + 8 * (i >> 2); }
};
FT_KERNEL(32, ft_probe_broken_mma)(AtomProbeArgs p) { atom_probe<broken_mma>(p); }
#endif

#if defined(FT_FLAVOUR_EMU) && FT_EMU_WAVE_SIZE == 64
FT_PROBE(mfma_f32_16x16x16_bf16)
FT_PROBE(mfma_f32_32x32x8_bf16)
FT_PROBE(mfma_f32_16x16x16_f16)
FT_PROBE(mfma_f32_32x32x8_f16)
FT_PROBE(mfma_f32_16x16x32_bf16)
FT_PROBE(mfma_f32_32x32x16_bf16)
FT_PROBE(mfma_f32_16x16x32_f16)
FT_PROBE(mfma_f32_32x32x16_f16)

// A mutant: lanes of K-group g load the operands of K-group g+1.
struct broken_mfma : ft::atom::mfma_f32_16x16x16_bf16 {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return ((l / M + 1) % (K / a_regs)) * a_regs + i; }
};
FT_KERNEL(64, ft_probe_broken_mfma)(AtomProbeArgs p) { atom_probe<broken_mfma>(p); }
#endif
