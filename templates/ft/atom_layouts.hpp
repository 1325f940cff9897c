#pragma once
// What a matrix instruction means: its shape and which lane holds which
// element of A (M x K), B (N x K: weights are stored output-channel major) and
// the accumulator C (M x N). Pure constexpr formulas, shared by the hardware
// atoms, the emulator (atom_emulate.hpp) and host-side tests.
//
// Every layout satisfies: within a run of `a_contig` (`b_contig`) consecutive
// register slots starting at a multiple of it, the row is fixed and k is
// consecutive, so fragments load as one vector from LDS.
namespace ft {

// AMD CDNA MFMA, wave64, f32 accumulation (CDNA3/CDNA4 ISA "dependent
// instruction layouts"): A lane l holds row l % M, K-group l / M; C lane l holds
// column l % N and rows in blocks of 4.
template <int M_, int N_, int K_, Elem E_>
struct MfmaLayout {
  static constexpr int M = M_, N = N_, K = K_;
  static constexpr Elem elem = E_;
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

}  // namespace ft
