#pragma once
// Stage 2: the [T*k, I] intermediate rows (already grouped by expert through
// sorted_ids) times the expert's W2 rows, scaled by the routed weight unless
// stage 1 applied it, then either atomically added into the fp32 [T, H] sums or
// written as per-slot partials [T*k, H] (fp32, or in the element type) for the
// reduce kernel.
// Grid: (max_padded_rows / tile_m, H / tile_n, split_k), or a persistent grid
// walking those tiles (tile_order.hpp).
//
// fp8 layers (tile_fp8): A is the e4m3 intermediate. With its 1 x 128 group
// scales (InterScales::group), which change along k, every 128-deep group is
// promoted with its scales inside the GEMM (with W2's block scales in block128
// mode; on the shared ring or in a producer warpgroup's consumers,
// wgmma_gemm.hpp). With one scale per row (InterScales::row: per-tensor and
// per-token layers) the scales are constant along k: the GEMM accumulates in
// wgmma's own accumulators (promote = 0: one set, so the m128n256 tile fits)
// or promotes every n k-tiles with unit scales, and the epilogue applies the
// row's scale (slot 0 of its row: every slot holds it). Per-tensor and
// per-channel W2 scales are applied in the epilogue. Partials16 and Y are bf16.
// With a static intermediate scale (Scales::static_tensor) stage 1 wrote it
// into every slot: read as row scales (the wgmma family's legality), or as
// group scales by a family without that choice (the tiled one).
//
// The _y modes (atomic_y, partials_y: moe_args.hpp) write Y here, with no
// reduce step: after its sums, each thread fences and arrives on the counters
// of the (token, 32-column chunk)s it stored (DirectY); the arrival that
// completes a chunk converts it.
namespace ft {

// The arrival counters and the finishing of Y of the _y modes. Stage2 takes it
// as a parameter so a test can give it a broken count (tests/emu/units).
template <class Cfg>
struct DirectY {
  // The values chunk c of token t receives in all: 32 from every valid slot of t and every split.
  FT_DEVICE static int expected(const MoeArgs& p, int t) {
    int slots = 0;
    for (int s = 0; s < p.topk; ++s) {
      const int e = p.topk_ids[(long long)t * p.topk + s];
      slots += e >= 0 && e < p.experts ? 1 : 0;
    }
    return slots * Cfg::split_k * kDirectYColumns;
  }
  // Where the sums (atomic_y) or the per-slot rows (partials_y) start: after the counters.
  FT_DEVICE static float* sums(const MoeArgs& p) { return p.y_acc + direct_y_words(p.tokens, p.hidden); }
  // This thread stored n values of token t in chunk c, and fenced them.
  FT_DEVICE static void arrive(const MoeArgs& p, int t, int c, int n) { arrive_expecting(p, t, c, n, expected(p, t)); }
  FT_DEVICE static void arrive_expecting(const MoeArgs& p, int t, int c, int n, int want) {
    int* counter = reinterpret_cast<int*>(p.y_acc) + (long long)t * (p.hidden / kDirectYColumns) + c;
    if (atomic_add(counter, n) + n != want) return;
    fence_device();  // every other arrival's values are visible from here on
    finish(p, t, c * kDirectYColumns);
  }
  FT_DEVICE static void finish(const MoeArgs& p, int t, int c0) { finish_from(p, sums(p), t, c0); }
  // Y[t, c0 .. c0 + 32): the fp32 sums, or the valid slots' rows summed in slot
  // order, read from `base` (sums(p), or the one-launch layer's rows).
  FT_DEVICE static void finish_from(const MoeArgs& p, const float* base, int t, int c0) {
    const long long H = p.hidden;
    float v[kDirectYColumns];
    if constexpr (Cfg::reduce == Reduce::atomic_y) {
      const float* row = base + t * H + c0;
      FT_UNROLL for (int j = 0; j < kDirectYColumns; ++j) v[j] = load_coherent(row + j);
    } else {
      FT_UNROLL for (int j = 0; j < kDirectYColumns; ++j) v[j] = 0.0f;
      for (int s = 0; s < p.topk; ++s) {
        const int e = p.topk_ids[(long long)t * p.topk + s];
        if (e < 0 || e >= p.experts) continue;
        const float* row = base + ((long long)t * p.topk + s) * H + c0;
        FT_UNROLL for (int j = 0; j < kDirectYColumns; ++j) v[j] += load_coherent(row + j);
      }
    }
    FT_UNROLL for (int j = 0; j < kDirectYColumns; j += 8) {
      alignas(16) u16 out[8];
      FT_UNROLL for (int i = 0; i < 8; ++i) out[i] = from_f32<Cfg::elem>(v[j + i]);
      copy_aligned<u16, 8>(p.y + t * H + c0 + j, out);
    }
  }
};

template <class Cfg, class Y = DirectY<Cfg>>
struct Stage2 {
  static constexpr bool kFp8 = fp8_stage<Cfg>();
  static constexpr Scales kScales = scales_of<Cfg>();
  static constexpr bool kRowScales = inter_scales_of<Cfg>() == InterScales::row;
  static constexpr int kPromoteEvery = promote_every_of<Cfg>();
  using Gemm = GemmFor<Cfg, 1, kPromoteEvery>;
  static constexpr int kThreads = Gemm::kThreads;
  static constexpr int kSmemBytes = Gemm::kSmemBytes;
  static constexpr Reduce kSums = sums_of(Cfg::reduce);  // how the sums are kept (the _y modes: as atomic / partials)
  static_assert(Cfg::split_k == 1 || kSums == Reduce::atomic, "split-K partial sums need atomic reduction");
  static_assert(kFp8 == (kScales != Scales::none), "fp8 stages, and only they, have scales");
  static_assert(!kRowScales || (kFp8 && kScales != Scales::block128), "row scales: per-tensor and per-token fp8 layers");
  static_assert(kRowScales || kPromoteEvery == (kFp8 ? 1 : 0),
                "an fp8 stage 2 on group scales promotes every k-tile (its A scales change along k)");

  // weight_map: W2's tensor map (WeightLayout::mapped, moe_mapped_args.hpp); null otherwise.
  FT_DEVICE static void run(const MoeArgs& p, const TensorMap* weight_map = nullptr) {
    Gemm g;
    if constexpr (Cfg::layout == WeightLayout::mapped) g.map_weights(weight_map);
    run_tiles<Cfg>(g, p.max_padded_rows / Cfg::tile_m, p.hidden / Cfg::tile_n, Cfg::split_k,
                   [&](int row_block, int col_tile, int split, auto lanes) {
                     if constexpr (kFp8) tile_fp8(p, g, row_block, col_tile, split, lanes);
                     else tile(p, g, row_block, col_tile, split, lanes);
                   },
                   tickets_of<Cfg>(p.tile_tickets, 1, p.padded_rows));
  }

  // Adds (atomic) or writes (partials) the sums of pair `id` at columns c, c+1, ...
  template <int N>
  FT_DEVICE static void store_sums(const MoeArgs& p, int id, int c, const float (&v)[N]) {
    const long long H = p.hidden;
    float* const base = writes_y(Cfg::reduce) ? Y::sums(p) : p.y_acc;
    if constexpr (kSums == Reduce::atomic) {
      float* out = &base[(long long)(id / p.topk) * H + c];
      if constexpr (N == 2) atomic_add_pair(out, v[0], v[1]);
      else atomic_add(out, v[0]);
    } else if constexpr (kSums == Reduce::partials) {
      float* out = &base[(long long)id * H + c];
      if constexpr (N == 2) store_pair(out, v[0], v[1]);
      else *out = v[0];
    } else {  // partials16: the slot's row rounded to the element type
      u16* out = reinterpret_cast<u16*>(p.y_acc) + (long long)id * H + c;
      if constexpr (N == 2) store_pair(out, from_f32<Cfg::elem>(v[0]), from_f32<Cfg::elem>(v[1]));
      else *out = from_f32<Cfg::elem>(v[0]);
    }
  }

  // lanes: which lanes run this copy (lanes.hpp; run_tiles).
  template <class Lanes = AllLanes>
  FT_DEVICE static void tile(const MoeArgs& p, Gemm& g, int row_block, int col_tile, int split, Lanes lanes = {}) {
    const int row0 = row_block * Cfg::tile_m;
    if (row0 >= *p.padded_rows) return;
    const int expert = p.block_experts[row0 / p.align_block];
    const int n0 = col_tile * Cfg::tile_n;
    const int pairs = p.tokens * p.topk;
    const long long H = p.hidden, I = p.inter_size;
    const i32* ids = p.sorted_ids + row0;
    const int k_len = int(I) / Cfg::split_k;
    const int k_begin = split * k_len;

    g.setup(
        [&](int r) -> const u16* {
          const int id = ids[r];
          return id < pairs ? p.inter + (long long)id * I : nullptr;
        },
        [&](int, int r, int k) -> const u16* {
          return p.w2 + weight_offset<Cfg::layout>((long long)expert * H + n0 + r, k, I, p.experts * H);
        },
        p.w2, I);  // the mapped matrix (kMapped)
    g.run(k_begin, k_begin + k_len, lanes);

    if (!g.holds_tile(lanes)) return;  // a producer warpgroup only copied (ping-pong: or the other computed)
    constexpr int kStep = Gemm::kPairedColumns ? 2 : 1;  // adjacent columns added / stored together
    FT_UNROLL for (int rm = 0; rm < Gemm::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Gemm::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Gemm::kCRegs; i += kStep) {
          const int id = ids[Gemm::acc_row(rm, i)];
          if (id >= pairs) continue;
          float v[kStep];
          FT_UNROLL for (int s = 0; s < kStep; ++s) {
            v[s] = g.acc_at(0, rm, rn, i + s);
            if constexpr (!Cfg::weight_in_stage1) v[s] *= p.topk_weights[id];
          }
          store_sums(p, id, n0 + Gemm::acc_col(rn, i), v);
        }
    arrive_tile(p, ids, n0, pairs);
  }

  // The _y modes: after this thread's sums of the tile, fence once and arrive
  // on each (token, chunk) it stored, adding up consecutive values of one
  // chunk (one call site, so the finishing code is inlined once).
  FT_DEVICE static void arrive_tile(const MoeArgs& p, const i32* ids, int n0, int pairs) {
    if constexpr (writes_y(Cfg::reduce)) {
      fence_device();
      constexpr int kStep = Gemm::kPairedColumns ? 2 : 1;
      constexpr int kPerRn = Gemm::kCRegs / kStep, kTotal = Gemm::RM * Gemm::RN * kPerRn;
      int t = -1, chunk = 0, n = 0;
      for (int j = 0; j <= kTotal; ++j) {
        int tj = -1, cj = 0;
        if (j < kTotal) {
          const int rm = j / (Gemm::RN * kPerRn), rn = j / kPerRn % Gemm::RN, i = j % kPerRn * kStep;
          const int id = ids[Gemm::acc_row(rm, i)];
          if (id >= pairs) continue;
          tj = id / p.topk;
          cj = (n0 + Gemm::acc_col(rn, i)) / kDirectYColumns;
          if (tj == t && cj == chunk) {
            n += kStep;
            continue;
          }
        }
        if (n) Y::arrive(p, t, chunk, n);
        t = tj;
        chunk = cj;
        n = kStep;
      }
    }
  }

  template <class Lanes = AllLanes>
  FT_DEVICE static void tile_fp8(const MoeArgs& p, Gemm& g, int row_block, int col_tile, int split, Lanes lanes = {}) {
    const int row0 = row_block * Cfg::tile_m;
    if (row0 >= *p.padded_rows) return;
    const int expert = p.block_experts[row0 / p.align_block];
    const int n0 = col_tile * Cfg::tile_n;
    const int pairs = p.tokens * p.topk;
    const long long H = p.hidden, I = p.inter_size;
    const i32* ids = p.sorted_ids + row0;
    const int k_len = int(I) / Cfg::split_k;
    const int k_begin = split * k_len;
    const u8* w2 = reinterpret_cast<const u8*>(p.w2);
    g.setup(
        [&](int r) -> const u8* {
          const int id = ids[r];
          return id < pairs ? p.inter_q + (long long)id * I : nullptr;
        },
        [&](int, int r, int k) -> const u8* {
          return w2 + weight_offset<Cfg::layout, 1>((long long)expert * H + n0 + r, k, I, p.experts * H);
        },
        p.w2, I);  // the mapped matrix (kMapped)
    const int groups = int(I / kScaleGroup);
    if constexpr (kRowScales) {
      if constexpr (kPromoteEvery > 0) g.run_scaled(k_begin, k_begin + k_len, UnitScales{}, lanes);
      else g.run(k_begin, k_begin + k_len, lanes);  // one set: the row's scale is the epilogue's
    } else {
      const float* w_row = nullptr;  // block128: tile_n divides 128, so the tile's rows share a block row
      if constexpr (kScales == Scales::block128) w_row = p.w2_scales + ((long long)expert * H + n0) / kScaleGroup * groups;
      g.run_scaled(k_begin, k_begin + k_len, Stage2Scales{ids, pairs, groups, p.inter_scales, w_row}, lanes);
    }
    if (!g.holds_tile(lanes)) return;  // a producer warpgroup only copied (ping-pong: or the other computed)

    constexpr int kStep = Gemm::kPairedColumns ? 2 : 1;
    FT_UNROLL for (int rm = 0; rm < Gemm::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Gemm::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Gemm::kCRegs; i += kStep) {
          const int id = ids[Gemm::acc_row(rm, i)];
          if (id >= pairs) continue;
          const int c = n0 + Gemm::acc_col(rn, i);
          float v[kStep];
          FT_UNROLL for (int s = 0; s < kStep; ++s) {
            v[s] = g.acc_at(0, rm, rn, i + s);
            if constexpr (kRowScales) v[s] *= p.inter_scales[(long long)id * groups];
            if constexpr (tensor_scales(kScales)) v[s] *= p.w2_scales[expert];
            else if constexpr (kScales == Scales::per_token) v[s] *= p.w2_scales[(long long)expert * H + c + s];
            if constexpr (!Cfg::weight_in_stage1) v[s] *= p.topk_weights[id];
          }
          store_sums(p, id, c, v);
        }
    arrive_tile(p, ids, n0, pairs);
  }
};

}  // namespace ft
