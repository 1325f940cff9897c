#pragma once
// What a matrix instruction means: its shape and which lane holds which
// element of A (M x K), B (N x K: weights are stored output-channel major) and
// the accumulator C (M x N). Pure constexpr formulas, shared by the hardware
// atoms, the emulator (atom_emulate.hpp) and host-side tests.
//
// Every layout satisfies: within a run of `a_contig` (`b_contig`) consecutive
// register slots starting at a multiple of it, the row is fixed and k is
// consecutive, so fragments load as one vector from LDS. A register slot holds
// one element of `storage` (u16 for the 16-bit types, u8 for fp8): a_regs and
// b_regs count elements, not 32-bit registers.
namespace ft {

// Whether the target being compiled reads fp8 operands as E: its e4m3 flavour
// (FT_TARGET_E4M3, numeric.hpp). An fp8 atom static_asserts it where it is used,
// so a gfx942 (fnuz) row cannot compile for gfx950 (OCP) or the other way round:
// the same builtin would silently read the bytes in the other format there.
template <Elem E>
FT_HOST_DEVICE constexpr bool target_reads_fp8_as() {
#if defined(FT_TARGET_E4M3)
  return E == Elem::FT_TARGET_E4M3;
#else
  return false;
#endif
}
template <Elem E>
FT_HOST_DEVICE constexpr bool operands_fit_target() {
  return !is_fp8(E) || target_reads_fp8_as<E>();
}
// (A function of the atom type, so the atom macros, whose parameter is named
// `elem`, need not spell the member.)
template <class Atom>
FT_HOST_DEVICE constexpr bool atom_fits_target() {
  return operands_fit_target<Atom::elem>();
}
#define FT_FP8_FLAVOUR_MISMATCH                                                                      \
  "this fp8 atom's operand format is not the one the target being compiled reads (generator/targets.def's " \
  "fp8 column: e4m3fnuz on gfx942, OCP e4m3 on gfx950 and sm_90a)"

// AMD CDNA MFMA, wave64, f32 accumulation (CDNA3/CDNA4 ISA "dependent
// instruction layouts"): A lane l holds row l % M, K-group l / M; C lane l holds
// column l % N and rows in blocks of 4. The 8-bit shapes (16x16x32, 32x32x16
// fp8) follow the same rule with 8 consecutive k per lane: one 64-bit register
// pair per operand (CDNA3 ISA, and ck_tile's fp8 MFMA attributes: K lanes 4 / 2,
// 8 k per lane).
template <int M_, int N_, int K_, Elem E_>
struct MfmaLayout {
  static constexpr int M = M_, N = N_, K = K_;
  static constexpr Elem elem = E_;
  static constexpr Elem element = E_;  // the spelling every atom has (the wgmma rows' macro cannot say elem)
  using storage = storage_t<E_>;
  static constexpr int lanes = 64;
  static constexpr bool kWarpgroup = false;  // a wave-level atom (TiledGemm), not a wgmma (WgmmaGemm)
  static constexpr int a_regs = M * K / 64;
  static constexpr int b_regs = N * K / 64;
  static constexpr int c_regs = M * N / 64;
  static constexpr int a_contig = a_regs;
  static constexpr int b_contig = b_regs;
  static_assert(M == N && (M == 16 || M == 32), "MFMA layouts here are square 16x16 or 32x32");

  FT_HOST_DEVICE static constexpr int a_row(int l, int) { return l % M; }
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return (l / M) * a_regs + i; }
  FT_HOST_DEVICE static constexpr int b_col(int l, int) { return l % N; }
  FT_HOST_DEVICE static constexpr int b_k(int l, int i) { return (l / N) * b_regs + i; }
  FT_HOST_DEVICE static constexpr int c_row(int l, int i) { return (i / 4) * (4 * (64 / M)) + (l / M) * 4 + i % 4; }
  FT_HOST_DEVICE static constexpr int c_col(int l, int) { return l % N; }
};

// NVIDIA mma.sync.aligned.m16n8k16.row.col, warp of 32, f32 accumulation
// (PTX ISA, "Matrix Fragments for mma.m16n8k16" with 16-bit types):
// group g = lane / 4, thread-in-group t = lane % 4.
template <Elem E_>
struct MmaSyncM16N8K16Layout {
  static constexpr int M = 16, N = 8, K = 16;
  static constexpr Elem elem = E_;
  static constexpr Elem element = E_;  // the spelling every atom has (the wgmma rows' macro cannot say elem)
  using storage = storage_t<E_>;
  static_assert(!is_fp8(E_), "m16n8k16 takes 16-bit operands here; e4m3 is m16n8k32");
  static constexpr int lanes = 32;
  static constexpr bool kWarpgroup = false;
  static constexpr int a_regs = 8, b_regs = 4, c_regs = 4;
  static constexpr int a_contig = 2, b_contig = 2;

  FT_HOST_DEVICE static constexpr int a_row(int l, int i) { return (l >> 2) + 8 * ((i >> 1) & 1); }
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return 2 * (l & 3) + (i & 1) + 8 * (i >> 2); }
  FT_HOST_DEVICE static constexpr int b_col(int l, int) { return l >> 2; }
  FT_HOST_DEVICE static constexpr int b_k(int l, int i) { return 2 * (l & 3) + (i & 1) + 8 * (i >> 1); }
  FT_HOST_DEVICE static constexpr int c_row(int l, int i) { return (l >> 2) + 8 * (i >> 1); }
  FT_HOST_DEVICE static constexpr int c_col(int l, int i) { return 2 * (l & 3) + (i & 1); }
};

// NVIDIA mma.sync.aligned.m16n8k32.row.col with 8-bit operands (e4m3), warp of
// 32, f32 accumulation (PTX ISA, "Matrix Fragments for mma.m16n8k32" with 8-bit
// types; CUTLASS's SM89_16x8x32_F32E4M3E4M3F32_TN): each .b32 register holds 4
// consecutive-k values. A: 4 registers a0..a15, row g + 8 ((i / 4) % 2), k
// 4 t + i % 4 + 16 (i / 8); B: 2 registers b0..b7, column g, k 4 t + i % 4 +
// 16 (i / 4); C as in m16n8k16 (g = lane / 4, t = lane % 4).
template <Elem E_>
struct MmaSyncM16N8K32Layout {
  static constexpr int M = 16, N = 8, K = 32;
  static constexpr Elem elem = E_;
  static constexpr Elem element = E_;  // the spelling every atom has (the wgmma rows' macro cannot say elem)
  using storage = storage_t<E_>;
  static_assert(is_fp8(E_), "m16n8k32 here takes 8-bit (e4m3) operands");
  static constexpr int lanes = 32;
  static constexpr bool kWarpgroup = false;
  static constexpr int a_regs = 16, b_regs = 8, c_regs = 4;
  static constexpr int a_contig = 4, b_contig = 4;

  FT_HOST_DEVICE static constexpr int a_row(int l, int i) { return (l >> 2) + 8 * ((i >> 2) & 1); }
  FT_HOST_DEVICE static constexpr int a_k(int l, int i) { return 4 * (l & 3) + (i & 3) + 16 * (i >> 3); }
  FT_HOST_DEVICE static constexpr int b_col(int l, int) { return l >> 2; }
  FT_HOST_DEVICE static constexpr int b_k(int l, int i) { return 4 * (l & 3) + (i & 3) + 16 * (i >> 2); }
  FT_HOST_DEVICE static constexpr int c_row(int l, int i) { return (l >> 2) + 8 * (i >> 1); }
  FT_HOST_DEVICE static constexpr int c_col(int l, int i) { return 2 * (l & 3) + (i & 1); }
};

// The mma.sync layout of a row: m16n8k16 for 16-bit operands, m16n8k32 for e4m3.
template <Elem E, int K>
struct MmaSyncLayoutFor {
  using type = MmaSyncM16N8K16Layout<E>;
};
template <Elem E>
struct MmaSyncLayoutFor<E, 32> {
  using type = MmaSyncM16N8K32Layout<E>;
};

}  // namespace ft
