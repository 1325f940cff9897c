#pragma once
// The last kernel of the layer: Y = the fp32 sums (atomic mode) or the fp32
// sum of each token's k per-slot partials (partials modes: fp32 or 16-bit
// partials), converted to the output type.
// A slot whose expert id is not in [0, experts) (-1: another rank's expert)
// has no partial row written by stage 2 and is skipped.
// Each thread writes 8 consecutive outputs (one 16-byte store).
// Grid: ceil(T * H / 8 / kReduceThreads).
namespace ft {

template <Reduce R, Elem E>
FT_DEVICE void moe_reduce(const MoeArgs& p) {
  const long long H = p.hidden;
  const long long first = ((long long)block_index_x() * kReduceThreads + thread_index()) * 8;
  if (first >= (long long)p.tokens * H) return;
  const long long t = first / H, h = first % H;  // H % 8 == 0: the 8 outputs share a token
  alignas(16) float v[8];
  FT_UNROLL for (int j = 0; j < 8; ++j) v[j] = 0.0f;
  if constexpr (R == Reduce::atomic) {
    copy_aligned<float, 4>(v, p.y_acc + first);
    copy_aligned<float, 4>(v + 4, p.y_acc + first + 4);
  } else {
    for (int s = 0; s < p.topk; ++s) {
      const int e = p.topk_ids[t * p.topk + s];
      if (e < 0 || e >= p.experts) continue;
      if constexpr (R == Reduce::partials) {
        const float* row = p.y_acc + (t * p.topk + s) * H + h;
        alignas(16) float part[8];
        copy_aligned<float, 4>(part, row);
        copy_aligned<float, 4>(part + 4, row + 4);
        FT_UNROLL for (int j = 0; j < 8; ++j) v[j] += part[j];
      } else {  // partials16: one 16-byte load of the slot's 8 values
        alignas(16) u16 row[8];
        copy_aligned<u16, 8>(row, reinterpret_cast<const u16*>(p.y_acc) + (t * p.topk + s) * H + h);
        FT_UNROLL for (int j = 0; j < 8; ++j) v[j] += to_f32<E>(row[j]);
      }
    }
  }
  alignas(16) u16 out[8];
  FT_UNROLL for (int j = 0; j < 8; ++j) out[j] = from_f32<E>(v[j]);
  copy_aligned<u16, 8>(p.y + first, out);
}

// Rearranges weights into the shuffled or the tiled layout (weight_layout.hpp),
// one 16-byte chunk per thread. Grid: ceil(rows * cols / 8 / kReduceThreads).
FT_DEVICE void shuffle_weights(const ShuffleArgs& s) {
  const long long c = (long long)block_index_x() * kReduceThreads + thread_index();
  const long long per_row = s.cols / 8;
  if (c >= (long long)s.rows * per_row) return;
  const long long row = c / per_row, k = (c % per_row) * 8;
  const long long to = s.layout == int(WeightLayout::tiled) ? tiled_offset(row, k, s.rows) : shuffled_offset(row, k, s.cols);
  *reinterpret_cast<Chunk16*>(s.dst + to) =
      *reinterpret_cast<const Chunk16*>(s.src + row * s.cols + k);
}

}  // namespace ft
