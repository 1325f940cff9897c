#pragma once
// Where element (row n, column k) of a weight matrix [rows, K] lives.
// plain:    row-major.
// shuffled: 16-row x 8-column (16-byte) blocks stored contiguously, blocks in
//           row-block-major order, so the 16 rows an atom's lanes need for one
//           k-chunk are 256 consecutive bytes (one fully coalesced load).
namespace ft {

FT_HOST_DEVICE long long shuffled_offset(long long row, long long k, long long cols) {
  return (((row >> 4) * (cols >> 3) + (k >> 3)) * 16 + (row & 15)) * 8 + (k & 7);
}

template <WeightLayout L>
FT_HOST_DEVICE long long weight_offset(long long row, long long k, long long cols) {
  if constexpr (L == WeightLayout::plain) return row * cols + k;
  else return shuffled_offset(row, k, cols);
}

}  // namespace ft
