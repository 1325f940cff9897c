#pragma once
// Stage 1: gather X rows by the sorted pair ids, multiply by the expert's gate
// and up rows of W1 (two accumulators sharing each A fragment), apply SwiGLU
// (silu(gate) * up) and optionally the routed weight, write [T*k, I].
// Grid: (max_padded_rows / tile_m, I / tile_n), or a persistent grid walking
// those tiles (tile_order.hpp); tiles past the padded rows are skipped.
//
// fp8 layers (tile_fp8): A is quantise_x's e4m3 rows of X, W1 holds e4m3
// codes; the products are dequantised by the scales (templates/ft/moe_args.hpp:
// block128 per 128-deep k group inside the GEMM, per-tensor and per-token in
// the epilogue, with the GEMM promoting every Cfg::promote k-tiles or never:
// promote_every_of, moe_scales.hpp), and the intermediate leaves as bf16 (quantise_inter makes it
// e4m3) or, with inter_store = fp8, quantised here: the tile's values are
// staged in shared memory and each row's 128-column groups written as e4m3
// codes with their scale (store_quantised). With the caller's static scale
// (Scales::static_tensor) each thread quantises its own values with it, no
// staging and no barrier (so a producer warpgroup's consumers do too), and
// writes it into the row's scale slots it owns (store_static).
namespace ft {

template <class Cfg>
struct Stage1 {
  static constexpr bool kFp8 = fp8_stage<Cfg>();
  static constexpr Scales kScales = scales_of<Cfg>();
  static constexpr bool kQuantiseOnStore = inter_store_of<Cfg>() == InterStore::fp8;
  static constexpr bool kStaticInter = kScales == Scales::static_tensor;  // quantised on store with p.inter_scale[0]
  static constexpr int kPromoteEvery = promote_every_of<Cfg>();  // fp8: every n k-tiles, or 0: never
  using Gemm = GemmFor<Cfg, 2, kPromoteEvery>;
  static constexpr int kThreads = Gemm::kThreads;
  // Quantise-on-store stages the tile (fp32) and one partial amax per 8 values.
  static constexpr int kStagedBytes = kQuantiseOnStore ? Cfg::tile_m * Cfg::tile_n * 4 + Cfg::tile_m * Cfg::tile_n / 2 : 0;
  static constexpr int kSmemBytes = Gemm::kSmemBytes > kStagedBytes ? Gemm::kSmemBytes : kStagedBytes;
  static_assert(kFp8 == (kScales != Scales::none), "fp8 stages, and only they, have scales");
  static_assert(kScales != Scales::block128 || kPromoteEvery == 1, "block128 scales change with each k-tile: promote every one");
  static_assert(Cfg::Atom::kWarpgroup || kPromoteEvery <= 1, "the tiled machinery promotes every scale group or never");
  static_assert(!(kStaticInter && kQuantiseOnStore), "a static intermediate scale has no group quantise-on-store");
  static_assert(quantise_on_store_fits<Cfg>(),
                "quantise-on-store: fp8, whole 128-column groups per tile, every thread in the epilogue");

  // weight_map: W1's tensor map (WeightLayout::mapped, moe_mapped_args.hpp); null otherwise.
  FT_DEVICE static void run(const MoeArgs& p, const TensorMap* weight_map = nullptr) {
    Gemm g;
    if constexpr (Cfg::layout == WeightLayout::mapped) g.map_weights(weight_map);
    run_tiles<Cfg>(g, p.max_padded_rows / Cfg::tile_m, p.inter_size / Cfg::tile_n, 1, [&](int row_block, int col_tile, int, auto lanes) {
      if constexpr (kFp8) tile_fp8(p, g, row_block, col_tile, lanes);
      else tile(p, g, row_block, col_tile, lanes);
    }, tickets_of<Cfg>(p.tile_tickets, 0, p.padded_rows));
  }

  // lanes: which lanes run this copy (lanes.hpp; run_tiles).
  template <class Lanes = AllLanes>
  FT_DEVICE static void tile(const MoeArgs& p, Gemm& g, int row_block, int col_tile, Lanes lanes = {}) {
    const int row0 = row_block * Cfg::tile_m;
    if (row0 >= *p.padded_rows) return;  // uniform across the block
    const int expert = p.block_experts[row0 / p.align_block];
    const int n0 = col_tile * Cfg::tile_n;
    const int pairs = p.tokens * p.topk;
    const long long H = p.hidden, I = p.inter_size;
    const i32* ids = p.sorted_ids + row0;

    g.setup(
        [&](int r) -> const u16* {
          const int id = ids[r];
          return id < pairs ? p.x + (long long)(id / p.topk) * H : nullptr;
        },
        [&](int nb, int r, int k) -> const u16* {
          const long long row = (long long)expert * 2 * I + nb * I + n0 + r;  // nb 0: gate, 1: up
          return p.w1 + weight_offset<Cfg::layout>(row, k, H, p.experts * 2 * I);
        },
        p.w1, H);  // the mapped matrix (kMapped)
    g.run(0, int(H), lanes);

    if (!g.holds_tile(lanes)) return;  // a producer warpgroup only copied (ping-pong: or the other computed)
    constexpr int kStep = Gemm::kPairedColumns ? 2 : 1;  // adjacent columns stored together
    FT_UNROLL for (int rm = 0; rm < Gemm::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Gemm::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Gemm::kCRegs; i += kStep) {
          const int id = ids[Gemm::acc_row(rm, i)];
          if (id >= pairs) continue;
          u16 h[kStep];
          FT_UNROLL for (int s = 0; s < kStep; ++s) {
            const float gate = g.acc_at(0, rm, rn, i + s), up = g.acc_at(1, rm, rn, i + s);
            float v = silu(gate, exp_f32(-gate)) * up;
            if constexpr (Cfg::weight_in_stage1) v *= p.topk_weights[id];
            h[s] = from_f32<Cfg::elem>(v);
          }
          u16* out = p.inter + (long long)id * I + n0 + Gemm::acc_col(rn, i);
          if constexpr (kStep == 2) store_pair(out, h[0], h[1]);
          else *out = h[0];
        }
  }

  template <class Lanes = AllLanes>
  FT_DEVICE static void tile_fp8(const MoeArgs& p, Gemm& g, int row_block, int col_tile, Lanes lanes = {}) {
    const int row0 = row_block * Cfg::tile_m;
    if (row0 >= *p.padded_rows) return;  // uniform across the block
    const int expert = p.block_experts[row0 / p.align_block];
    const int n0 = col_tile * Cfg::tile_n;
    const int pairs = p.tokens * p.topk;
    const long long H = p.hidden, I = p.inter_size;
    const i32* ids = p.sorted_ids + row0;
    const u8* w1 = reinterpret_cast<const u8*>(p.w1);
    g.setup(
        [&](int r) -> const u8* {
          const int id = ids[r];
          return id < pairs ? p.xq + (long long)(id / p.topk) * H : nullptr;
        },
        [&](int nb, int r, int k) -> const u8* {
          const long long row = (long long)expert * 2 * I + nb * I + n0 + r;  // nb 0: gate, 1: up
          return w1 + weight_offset<Cfg::layout, 1>(row, k, H, p.experts * 2 * I);
        },
        p.w1, H);  // the mapped matrix (kMapped)
    if constexpr (kScales == Scales::block128) {
      const int groups = int(H / kScaleGroup);
      const long long gate_block = ((long long)expert * 2 * I + n0) / kScaleGroup;
      const Stage1BlockScales ks{ids, pairs, p.topk, groups, p.x_scales,
                                 {p.w1_scales + gate_block * groups, p.w1_scales + (gate_block + I / kScaleGroup) * groups}};
      g.run_scaled(0, int(H), ks, lanes);
    } else if constexpr (kPromoteEvery > 0) {
      g.run_scaled(0, int(H), UnitScales{}, lanes);
    } else {
      g.run(0, int(H), lanes);  // fast accumulation: the scales are the epilogue's (or a producer warpgroup's copies)
    }
    if (!g.holds_tile(lanes)) return;  // a producer warpgroup only copied (ping-pong: or the other computed)

    float* staged = reinterpret_cast<float*>(shared_memory());
    const float inter_scale = kStaticInter ? p.inter_scale[0] : 0.0f;  // read once: the code stores may alias it
    if constexpr (kQuantiseOnStore) barrier();  // every warp is done with the ring the tile is staged in
    constexpr int kStep = Gemm::kPairedColumns ? 2 : 1;  // adjacent columns stored together
    FT_UNROLL for (int rm = 0; rm < Gemm::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Gemm::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Gemm::kCRegs; i += kStep) {
          const int r = Gemm::acc_row(rm, i), id = ids[r];
          if (id >= pairs) continue;
          const int c = Gemm::acc_col(rn, i);
          float h[kStep];
          FT_UNROLL for (int s = 0; s < kStep; ++s) {
            float gate = g.acc_at(0, rm, rn, i + s), up = g.acc_at(1, rm, rn, i + s);
            if constexpr (tensor_scales(kScales)) {
              const float f = p.x_scales[0] * p.w1_scales[expert];
              gate *= f;
              up *= f;
            } else if constexpr (kScales == Scales::per_token) {
              const float xs = p.x_scales[id / p.topk];
              const long long channel = (long long)expert * 2 * I + n0 + c + s;
              gate *= xs * p.w1_scales[channel];
              up *= xs * p.w1_scales[channel + I];
            }
            float v = silu(gate, exp_f32(-gate)) * up;
            if constexpr (Cfg::weight_in_stage1) v *= p.topk_weights[id];
            h[s] = v;
          }
          if constexpr (kQuantiseOnStore) {
            FT_UNROLL for (int s = 0; s < kStep; ++s) staged[r * Cfg::tile_n + c + s] = h[s];
          } else if constexpr (kStaticInter) {
            store_static(p, id, n0 + c, h, inter_scale);
          } else {
            u16* out = p.inter + (long long)id * I + n0 + c;
            if constexpr (kStep == 2) store_pair(out, from_f32<Cfg::elem>(h[0]), from_f32<Cfg::elem>(h[1]));
            else *out = from_f32<Cfg::elem>(h[0]);
          }
        }
    if constexpr (kQuantiseOnStore) store_quantised(p, ids, pairs, n0, staged);
  }

  // Pair `id`'s values at columns c, c + 1, ... as e4m3 codes of the static
  // scale; the thread holding a 128-column group's first column writes the
  // scale into that group's slot, so stage 2 reads it as row (or group) scales.
  template <int N>
  FT_DEVICE static void store_static(const MoeArgs& p, int id, int c, const float (&h)[N], float scale) {
    constexpr Elem Q = Gemm::Atom::element;
    const long long I = p.inter_size;
    alignas(N) u8 q[N];
    FT_UNROLL for (int s = 0; s < N; ++s) q[s] = fp8_quantise<Q>(h[s], scale);
    if constexpr (N == 1) p.inter_q[(long long)id * I + c] = q[0];
    else copy_aligned<u8, N>(p.inter_q + (long long)id * I + c, q);  // c is a multiple of N
    if (c % kScaleGroup == 0) p.inter_scales[(long long)id * (I / kScaleGroup) + c / kScaleGroup] = scale;
  }

  // The staged tile as e4m3 codes, one scale per row and 128 columns: items of
  // 8 values (16 per group) take their amax, then each group's scale from its
  // 16 partial amaxes (fp8_scale_of, numeric.hpp), and write 8 codes.
  FT_DEVICE static void store_quantised(const MoeArgs& p, const i32* ids, int pairs, int n0, float* staged) {
    constexpr Elem Q = Gemm::Atom::element;
    constexpr int kGroups = Cfg::tile_n / kScaleGroup, kItems = Cfg::tile_m * kGroups * 16;
    float* partial = staged + Cfg::tile_m * Cfg::tile_n;
    const long long I = p.inter_size;
    barrier();  // the tile is staged
    for (int it = thread_index(); it < kItems; it += kThreads) {
      const float* v = staged + (it / (kGroups * 16)) * Cfg::tile_n + (it % (kGroups * 16)) * 8;
      float m = 0.0f;
      FT_UNROLL for (int j = 0; j < 8; ++j) m = abs_max(m, v[j]);
      partial[it] = m;
    }
    barrier();
    for (int it = thread_index(); it < kItems; it += kThreads) {
      const int r = it / (kGroups * 16), g = (it / 16) % kGroups;
      const int id = ids[r];
      if (id >= pairs) continue;
      float m = 0.0f;
      FT_UNROLL for (int j = 0; j < 16; ++j) m = abs_max(m, partial[it / 16 * 16 + j]);
      const float scale = fp8_scale_of<Q>(m);
      const float* v = staged + r * Cfg::tile_n + (it % (kGroups * 16)) * 8;
      alignas(8) u8 q[8];
      FT_UNROLL for (int j = 0; j < 8; ++j) q[j] = fp8_quantise<Q>(v[j], scale);
      copy_aligned<u8, 8>(p.inter_q + (long long)id * I + n0 + (it % (kGroups * 16)) * 8, q);
      if (it % 16 == 0) p.inter_scales[(long long)id * (I / kScaleGroup) + n0 / kScaleGroup + g] = scale;
    }
  }
};

}  // namespace ft
