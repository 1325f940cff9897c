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

#if defined(FT_FLAVOUR_CUDA) || (defined(FT_FLAVOUR_EMU) && FT_WAVE_SIZE == 32)
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

#if defined(FT_FLAVOUR_CUDA) || (defined(FT_FLAVOUR_EMU) && FT_WAVE_SIZE == 32)
// A wgmma atom, one warpgroup (128 threads), on A [64, 16] and B [64, 16]: the
// operands are written into a 1024-aligned, 128-byte-swizzled tile (A rows
// 0-63, B rows 64-127) at k offset 32 -- the third k16 step of a 64-deep row
// -- and read through descriptors; C in and out by the documented accumulator
// layout (atom_wgmma.hpp). N = 64 (AtomProbeInputs for warpgroup atoms).
template <class Atom>
FT_DEVICE void wgmma_probe(const AtomProbeArgs& p) {
  constexpr int N = 64, kOff = 32;
  unsigned char* window = ft::shared_memory();
  const ft::u32 window_addr = ft::shared_address(window);
  unsigned char* tile = window + (((window_addr + 1023u) & ~1023u) - window_addr);
  const int t = ft::thread_index();
  for (int e = t; e < (64 + N) * 16; e += 128) {
    const int row = e / 16, k = e % 16;
    const ft::u16 v = row < 64 ? p.a[row * 16 + k] : p.b[(row - 64) * 16 + k];
    FT_MEMCPY(tile + ft::swizzle128_offset(row, kOff + k), &v, 2);
  }
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = p.c_in[ft::wgmma_acc_row(t, i) * N + ft::wgmma_acc_col(t, i)];
  ft::fence_async_proxy();
  ft::barrier();
  const ft::u32 a = ft::shared_address(tile) + kOff * 2, b = ft::shared_address(tile) + 64 * 128 + kOff * 2;
  ft::wgmma_fence();
  ft::wgmma_fence_operands(d);
  Atom::template mma<N>(d, ft::wgmma_descriptor(a), ft::wgmma_descriptor(b));
  ft::wgmma_commit();
  ft::wgmma_wait<0>();
  ft::wgmma_fence_operands(d);
  for (int i = 0; i < N / 2; ++i) p.c_out[ft::wgmma_acc_row(t, i) * N + ft::wgmma_acc_col(t, i)] = d[i];
}

#define FT_WGMMA_PROBE(id) \
  FT_KERNEL(128, ft_probe_##id)(AtomProbeArgs p) { wgmma_probe<ft::atom::id>(p); }
FT_WGMMA_PROBE(wgmma_m64k16_f32_bf16)
FT_WGMMA_PROBE(wgmma_m64k16_f32_f16)
#endif

#if defined(FT_FLAVOUR_EMU) && FT_WAVE_SIZE == 64
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
