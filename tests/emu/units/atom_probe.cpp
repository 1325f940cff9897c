// One matrix atom on a single M x K by N x K operand pair, fragments loaded and
// stored by the atom's own lane layout (templates/ft/atom_layouts.hpp). Compiles
// for the emulator and for the GPU flavours, so the emulator's result can be
// compared with the hardware's (tests/emu/atom_test.cpp; the H200 cross-check),
// and the fp8 atoms' probes are the units tests/compile/atom_rows_test.cpp builds
// and disassembles for their rows. Operands are raw elements of the atom's
// storage type: u16 for the 16-bit types, u8 for fp8.
#include "ft/kernels.hpp"

struct AtomProbeArgs {
  const void* a;      // [M, K]
  const void* b;      // [N, K]
  const float* c_in;  // [M, N]
  float* c_out;       // [M, N]
};

// The operands as Atom loads them: raw elements of its storage type.
template <class Atom>
FT_DEVICE void atom_probe(const AtomProbeArgs& p) {
  using S = typename Atom::storage;
  const S* pa = static_cast<const S*>(p.a);
  const S* pb = static_cast<const S*>(p.b);
  const int lane = ft::thread_index() % Atom::lanes;
  S a[Atom::a_regs], b[Atom::b_regs];
  float c[Atom::c_regs];
  for (int i = 0; i < Atom::a_regs; ++i) a[i] = pa[Atom::a_row(lane, i) * Atom::K + Atom::a_k(lane, i)];
  for (int i = 0; i < Atom::b_regs; ++i) b[i] = pb[Atom::b_col(lane, i) * Atom::K + Atom::b_k(lane, i)];
  for (int i = 0; i < Atom::c_regs; ++i) c[i] = p.c_in[Atom::c_row(lane, i) * Atom::N + Atom::c_col(lane, i)];
  Atom::mma(c, a, b);
  for (int i = 0; i < Atom::c_regs; ++i) p.c_out[Atom::c_row(lane, i) * Atom::N + Atom::c_col(lane, i)] = c[i];
}

#define FT_PROBE(id) \
  FT_KERNEL(ft::atom::id::lanes, ft_probe_##id)(AtomProbeArgs p) { atom_probe<ft::atom::id>(p); }

#if defined(FT_FLAVOUR_CUDA) || (defined(FT_FLAVOUR_EMU) && FT_WAVE_SIZE == 32)
FT_PROBE(mma_m16n8k16_f32_bf16)
FT_PROBE(mma_m16n8k16_f32_f16)
FT_PROBE(mma_m16n8k32_f32_e4m3)

// A mutant: its A layout sends k 0-1 to the lanes that should hold k 2-3 (and
// so on). The instruction keeps its true layout (mma's Self is the base atom),
// so the operands the probe loads disagree with what the instruction reads.
struct broken_mma : ft::atom::mma_m16n8k16_f32_bf16 {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return 2 * ((l + 1) & 3) + (i & 1) + 8 * (i >> 2); }
};
FT_KERNEL(32, ft_probe_broken_mma)(AtomProbeArgs p) { atom_probe<broken_mma>(p); }

// The same for m16n8k32 e4m3: lanes load the 4-byte k group of their neighbour.
struct broken_mma_e4m3 : ft::atom::mma_m16n8k32_f32_e4m3 {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return 4 * ((l + 1) & 3) + (i & 3) + 16 * (i >> 3); }
};
FT_KERNEL(32, ft_probe_broken_mma_e4m3)(AtomProbeArgs p) { atom_probe<broken_mma_e4m3>(p); }
#endif

#if defined(FT_FLAVOUR_CUDA) || (defined(FT_FLAVOUR_EMU) && FT_WAVE_SIZE == 32)
// A wgmma atom, one warpgroup (128 threads), on A [64, K] and B [64, K]: the
// operands are written into a 1024-aligned, 128-byte-swizzled tile (A rows
// 0-63, B rows 64-127) at byte offset 64 of each row -- the third 32-byte k
// step of a 128-byte row (k 32 of bf16, k 64 of e4m3) -- and read through
// descriptors; C in and out by the documented accumulator layout
// (atom_wgmma.hpp). N = 64 (AtomProbeInputs for warpgroup atoms).
template <class Atom>
FT_DEVICE void wgmma_probe(const AtomProbeArgs& p) {
  using S = typename Atom::storage;
  constexpr int N = 64, K = Atom::K_, kOffBytes = 64;
  const S* pa = static_cast<const S*>(p.a);
  const S* pb = static_cast<const S*>(p.b);
  unsigned char* window = ft::shared_memory();
  const ft::u32 window_addr = ft::shared_address(window);
  unsigned char* tile = window + (((window_addr + 1023u) & ~1023u) - window_addr);
  const int t = ft::thread_index();
  for (int e = t; e < (64 + N) * K; e += 128) {
    const int row = e / K, k = e % K;
    const S v = row < 64 ? pa[row * K + k] : pb[(row - 64) * K + k];
    FT_MEMCPY(tile + ft::swizzle128_offset(row, kOffBytes / int(sizeof(S)) + k, int(sizeof(S))), &v, sizeof v);
  }
  float d[N / 2];
  for (int i = 0; i < N / 2; ++i) d[i] = p.c_in[ft::wgmma_acc_row(t, i) * N + ft::wgmma_acc_col(t, i)];
  ft::fence_async_proxy();
  ft::barrier();
  const ft::u32 a = ft::shared_address(tile) + kOffBytes, b = ft::shared_address(tile) + 64 * 128 + kOffBytes;
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
FT_WGMMA_PROBE(wgmma_m64k32_f32_e4m3)
#endif

#if defined(FT_FLAVOUR_CUDA)
// The hardware's fp8 conversions on an array, for the H200 to compare with
// templates/ft/numeric.hpp (tests/gpu/atom_crosscheck_test.cpp): encode[i] =
// cvt.rn.satfinite.e4m3x2.f32 of in[i] (the low byte holds the second source),
// decoded[i] = cvt.rn.f16x2.e4m3x2 of code i % 256 (the low half), as f16 bits.
struct CvtProbeArgs {
  const float* in;
  ft::u8* encoded;
  ft::u16* decoded;
  int n;
};
FT_KERNEL(256, ft_probe_cvt_e4m3)(CvtProbeArgs p) {
  const int i = int(ft::block_index_x()) * 256 + ft::thread_index();
  if (i >= p.n) return;
  ft::u16 pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(p.in[i]));
  p.encoded[i] = ft::u8(pair & 0xffu);
  ft::u32 halves;
  const ft::u16 code = ft::u16(i % 256);
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"(code));
  p.decoded[i] = ft::u16(halves & 0xffffu);
}
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

// The fp8 MFMA rows of the target's flavour (FT_FP8_FNUZ on gfx942, FT_FP8_OCP on
// gfx950; an fp8 row of the other flavour does not compile there), on the GPU
// (the compile test disassembles these) and emulated.
#if (defined(FT_FLAVOUR_HIP) || defined(FT_FLAVOUR_EMU)) && FT_WAVE_SIZE == 64 && \
    (defined(FT_FP8_FNUZ) || defined(FT_FP8_OCP))
#if defined(FT_FP8_FNUZ)
FT_PROBE(mfma_f32_16x16x32_e4m3fnuz)
FT_PROBE(mfma_f32_32x32x16_e4m3fnuz)
using fp8_mfma = ft::atom::mfma_f32_16x16x32_e4m3fnuz;
#else
FT_PROBE(mfma_f32_16x16x32_e4m3)
FT_PROBE(mfma_f32_32x32x16_e4m3)
using fp8_mfma = ft::atom::mfma_f32_16x16x32_e4m3;
#endif

// A mutant: lanes of K-group g load the 8 fp8 values of K-group g+1.
struct broken_mfma_fp8 : fp8_mfma {
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return ((l / M + 1) % (K / a_regs)) * a_regs + i; }
};
FT_KERNEL(64, ft_probe_broken_mfma_fp8)(AtomProbeArgs p) { atom_probe<broken_mfma_fp8>(p); }

#if defined(FT_FLAVOUR_EMU) && defined(FT_FP8_FNUZ)
// A mutant instruction: gfx942's 16x16x32 shape and lanes, reading its fnuz bytes
// as OCP e4m3 (the same bits mean twice the value there, and 0x7f / 0xff are NaN).
// It bypasses the atom's flavour check on purpose: this is the silent error that
// check exists to stop.
struct fnuz_read_as_ocp : ft::MfmaLayout<16, 16, 32, ft::Elem::e4m3> {
  FT_DEVICE static void mma(float (&c)[c_regs], const ft::u8 (&a)[a_regs], const ft::u8 (&b)[b_regs]) {
    ft::emu::emulate_mma<fnuz_read_as_ocp>(c, a, b);
  }
};
FT_KERNEL(64, ft_probe_fnuz_read_as_ocp)(AtomProbeArgs p) { atom_probe<fnuz_read_as_ocp>(p); }
#endif
#endif
