#pragma once
// What the backward's GEMMs (moe_kgrouped.hpp, moe_dgrad.hpp) share: the tiled
// machinery (tiled_gemm.hpp: its LDS layout, fragments and atoms) over
// operands the kernel stages itself, the 16-bit values of a staged chunk held
// as 32-bit words, and the main loop over k-slices, single or ping-pong.
namespace ft {

template <class Cfg>
struct StagedGemm {
  struct GemmCfg : Cfg {
    static constexpr WeightLayout layout = WeightLayout::plain;  // the kernel stages both operands
  };
  using Core = TiledGemm<GemmCfg, 1>;
  using S = typename Core::S;
  static constexpr int TM = Cfg::tile_m, TN = Cfg::tile_n, TK = Cfg::tile_k;
  static constexpr int kThreads = Core::kThreads;
  static constexpr int kSmemBytes = Core::kSmemBytes;
  static constexpr int kChunkElems = Core::kChunkElems;  // 16-bit values in a 16-byte chunk
  static_assert(sizeof(S) == 2, "16-bit operands");

  Core core;

  // Value i of a chunk held as four words (two values per word, the lower first).
  FT_DEVICE static S half_of(u32 w, int i) { return S(i % 2 ? w >> 16 : w & 0xffffu); }

  // acc = the sum over the k-slices k0 = k_begin, k_begin + TK, ... < k_end of
  // the slice fetch(k0) loads and store(buf) puts into LDS; loads of the next
  // slice overlap this slice's math with two LDS stages. The bounds are uniform
  // across the block.
  template <class Fetch, class Store>
  FT_DEVICE void accumulate(int k_begin, int k_end, Fetch fetch, Store store) {
    FT_UNROLL for (int rm = 0; rm < Core::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Core::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Core::kCRegs; ++i) core.acc[0][rm][rn][i] = 0.0f;
    S* lds = reinterpret_cast<S*>(shared_memory());
    if constexpr (Cfg::stages == 1) {
      for (int k0 = k_begin; k0 < k_end; k0 += TK) {
        fetch(k0);
        store(lds);
        barrier();
        core.compute(lds);
        barrier();
      }
    } else if (k_begin < k_end) {
      fetch(k_begin);
      store(lds);
      barrier();
      int cur = 0;
      for (int k0 = k_begin; k0 < k_end; k0 += TK) {
        const bool more = k0 + TK < k_end;
        if (more) fetch(k0 + TK);
        core.compute(lds + cur * Core::kStageElems);
        if (more) store(lds + (cur ^ 1) * Core::kStageElems);
        barrier();
        cur ^= 1;
      }
    }
  }
};

}  // namespace ft
