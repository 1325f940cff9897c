#pragma once
// The quantise steps of an fp8 layer (support kernels): 16-bit rows in, e4m3
// codes and fp32 scales out, by the rule of numeric.hpp (scale = amax / max,
// code = the saturating nearest-even encoding of value / scale).
//   moe_quantise_x:     X [T, H] (bf16) -> xq [T, H] and x_scales, by the layer's
//                       Scales (args.scales): per-tensor and static with the caller's
//                       static x_scale (copied to x_scales[0]), per-token one scale per row,
//                       block128 one per 128 values of a row.
//   moe_quantise_inter: stage 1's bf16 intermediate [T*k, I] -> inter_q and
//                       inter_scales [T*k, I/128] (every mode): 1 x 128 groups,
//                       or with kFlagInterRowScales one scale per row written
//                       to each of its I/128 slots; rows of pairs without an
//                       expert (-1 or bad ids) are skipped. Not in static mode
//                       (stage 1 quantises on store with the caller's inter_scale).
// Grid: one block of kQuantiseThreads per row (T, or T*k). Each thread takes
// 8 consecutive values (a 16-byte load) at a time; per-row amaxes reduce in LDS.
namespace ft {

#if defined(FT_TARGET_E4M3)
// Dynamic LDS: one float per thread (quantise_lds_bytes, moe_args.hpp).
// Row `src` [K] -> `dst` codes; `group` values share a scale (group == K: one
// per row, written to scales[0 .. slots - 1]), written to scales[g]; or, with
// `fixed` non-null, every value by *fixed.
template <Elem Q>
FT_DEVICE void quantise_row(const u16* src, u8* dst, float* scales, int K, int group, const float* fixed, int slots = 1) {
  float* part = reinterpret_cast<float*>(shared_memory());
  const int tid = thread_index(), chunks = K / 8;
  auto encode = [&](int c, float scale) {
    alignas(16) u16 in[8];
    alignas(8) u8 out[8];
    copy_aligned<u16, 8>(in, src + c * 8);
    FT_UNROLL for (int j = 0; j < 8; ++j) out[j] = fp8_quantise<Q>(bf16_to_f32(in[j]), scale);
    copy_aligned<u8, 8>(dst + c * 8, out);
  };
  auto chunk_amax = [&](int c) {
    alignas(16) u16 in[8];
    copy_aligned<u16, 8>(in, src + c * 8);
    float m = 0.0f;
    FT_UNROLL for (int j = 0; j < 8; ++j) m = abs_max(m, bf16_to_f32(in[j]));
    return m;
  };
  if (fixed) {
    const float scale = *fixed;
    for (int c = tid; c < chunks; c += kQuantiseThreads) encode(c, scale);
    return;
  }
  if (group == K) {  // one scale per row: the row's amax first (a tree over the threads' partials)
    float m = 0.0f;
    for (int c = tid; c < chunks; c += kQuantiseThreads) m = abs_max(m, chunk_amax(c));
    part[tid] = m;
    barrier();
    for (int s = kQuantiseThreads / 2; s > 0; s /= 2) {
      if (tid < s) part[tid] = abs_max(part[tid], part[tid + s]);
      barrier();
    }
    const float scale = fp8_scale_of<Q>(part[0]);
    for (int g = tid; g < slots; g += kQuantiseThreads) scales[g] = scale;
    for (int c = tid; c < chunks; c += kQuantiseThreads) encode(c, scale);
    return;
  }
  // 128-value groups: 16 chunks each, so a pass of the block covers whole groups.
  constexpr int kChunksPerGroup = kScaleGroup / 8;
  static_assert(kQuantiseThreads % kChunksPerGroup == 0, "a pass covers whole groups");
  for (int base = 0; base < chunks; base += kQuantiseThreads) {
    const int c = base + tid;
    part[tid] = c < chunks ? chunk_amax(c) : 0.0f;
    barrier();
    float m = 0.0f;
    const int first = tid / kChunksPerGroup * kChunksPerGroup;
    FT_UNROLL for (int j = 0; j < kChunksPerGroup; ++j) m = abs_max(m, part[first + j]);
    const float scale = fp8_scale_of<Q>(m);
    if (c < chunks) {
      if (c % kChunksPerGroup == 0) scales[c / kChunksPerGroup] = scale;
      encode(c, scale);
    }
    barrier();  // the next pass overwrites part
  }
}

FT_DEVICE void moe_quantise_x(const MoeArgs& p) {
  const int t = block_index_x();
  if (t >= p.tokens) return;
  const long long H = p.hidden;
  const Scales mode = Scales(p.scales);
  if (tensor_scales(mode) && t == 0 && thread_index() == 0) p.x_scales[0] = p.x_scale[0];
  float* scales = mode == Scales::per_token ? p.x_scales + t : p.x_scales + t * (H / kScaleGroup);
  quantise_row<Elem::FT_TARGET_E4M3>(p.x + t * H, p.xq + t * H, scales, int(H),
                                     mode == Scales::per_token ? int(H) : kScaleGroup,
                                     tensor_scales(mode) ? p.x_scale : nullptr);
}

FT_DEVICE void moe_quantise_inter(const MoeArgs& p) {
  const int row = block_index_x();
  if (row >= p.tokens * p.topk) return;
  const int e = p.topk_ids[row];
  if (e < 0 || e >= p.experts) return;  // no expert: stage 1 wrote nothing, stage 2 reads nothing
  const long long I = p.inter_size;
  const bool rows = p.flags & kFlagInterRowScales;
  quantise_row<Elem::FT_TARGET_E4M3>(p.inter + row * I, p.inter_q + row * I, p.inter_scales + row * (I / kScaleGroup), int(I),
                                     rows ? int(I) : kScaleGroup, nullptr, int(I / kScaleGroup));
}
#endif

}  // namespace ft
