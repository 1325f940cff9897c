#pragma once
// Where element (row n, column k) of a weight matrix [rows, K] lives.
// plain:    row-major.
// shuffled: 16-row x 8-column (16-byte) blocks stored contiguously, blocks in
//           row-block-major order, so the 16 rows an atom's lanes need for one
//           k-chunk are 256 consecutive bytes (one fully coalesced load).
// tiled:    64-column (128-byte) slices of all rows, slice after slice; in a
//           slice each row's eight 16-byte chunks sit in the 128-byte swizzle
//           (chunk c at c ^ (row % 8)). A run of rows starting at a multiple of
//           8 is then, byte for byte, the shared-memory tile wgmma reads, so
//           one bulk copy moves a whole weight tile (wgmma_gemm.hpp).
// mapped:   plain in memory; the TMA unit lays each box out in the swizzle
//           through a tensor map (wgmma_gemm.hpp, moe_mapped_args.hpp).
namespace ft {

FT_HOST_DEVICE long long shuffled_offset(long long row, long long k, long long cols) {
  return (((row >> 4) * (cols >> 3) + (k >> 3)) * 16 + (row & 15)) * 8 + (k & 7);
}

FT_HOST_DEVICE long long tiled_offset(long long row, long long k, long long rows) {
  return ((k >> 6) * rows + row) * 64 + ((((k >> 3) & 7) ^ (row & 7)) << 3) + (k & 7);
}

// Element (row, k) of a [rows, cols] weight matrix in layout L. The layouts
// are defined on 16-byte chunks, so a matrix of 1-byte elements (fp8 codes)
// is arranged as the 16-bit matrix [rows, cols / 2] of its byte pairs: the
// same kernel and host code arranges both, and byte k of a row sits at byte
// k & 1 of 16-bit element k / 2.
template <WeightLayout L, int ElemBytes = 2>
FT_HOST_DEVICE long long weight_offset(long long row, long long k, long long cols, long long rows) {
  static_assert(ElemBytes == 1 || ElemBytes == 2, "weights of 1- or 2-byte elements");
  if constexpr (L == WeightLayout::plain || L == WeightLayout::mapped) return row * cols + k;
  else if constexpr (ElemBytes == 1) return 2 * weight_offset<L, 2>(row, k >> 1, cols >> 1, rows) + (k & 1);
  else if constexpr (L == WeightLayout::shuffled) return shuffled_offset(row, k, cols);
  else return tiled_offset(row, k, rows);
}

}  // namespace ft
