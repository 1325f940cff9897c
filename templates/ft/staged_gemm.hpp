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
  // A k-slice's chunks: A's TM x TK values first, then B's TK x TN (how each
  // kernel lays its rows out over them is its own).
  static constexpr int kAChunks = TM * TK / kChunkElems;
  static constexpr int kChunks = kAChunks + TK * TN / kChunkElems;
  static constexpr int kChunksPerThread = (kChunks + kThreads - 1) / kThreads;
  static_assert(TM % kChunkElems == 0 && TN % kChunkElems == 0 && TK % kChunkElems == 0, "whole chunks per row");

  Core core;
  u32 staged[kChunksPerThread][4];  // this thread's chunks in flight (half_of)

  // Value i of a chunk held as four words (two values per word, the lower first).
  FT_DEVICE static S half_of(u32 w, int i) { return S(i % 2 ? w >> 16 : w & 0xffffu); }

  // acc = the sum over the k-slices k0 = k_begin, k_begin + TK, ... < k_end of
  // the slice fetch(k0) loads and store(buf) puts into LDS (tiled_gemm.hpp,
  // k_slices: single or ping-pong). The bounds are uniform across the block.
  template <class Fetch, class Store>
  FT_DEVICE void accumulate(int k_begin, int k_end, Fetch fetch, Store store) {
    FT_UNROLL for (int rm = 0; rm < Core::RM; ++rm)
      FT_UNROLL for (int rn = 0; rn < Core::RN; ++rn)
        FT_UNROLL for (int i = 0; i < Core::kCRegs; ++i) core.acc[0][rm][rn][i] = 0.0f;
    if (k_begin < k_end)  // an expert without rows: no slice to fetch
      k_slices<Cfg::stages, TK, Core::kStageElems>(reinterpret_cast<S*>(shared_memory()), k_begin, k_end, fetch, store,
                                                   [&](const S* buf, int) { core.compute(buf); });
  }
};

}  // namespace ft

// The names of StagedGemm<Cfg> a kernel deriving from it uses unqualified (a
// dependent base's members need naming): the first line of its body.
#define FT_STAGED_GEMM_NAMES                                                                                              \
  using Base = StagedGemm<Cfg>;                                                                                         \
  using typename Base::Core;                                                                                            \
  using typename Base::S;                                                                                               \
  using Base::TM, Base::TN, Base::TK, Base::kChunkElems, Base::kThreads, Base::kAChunks, Base::kChunks, Base::kChunksPerThread, \
      Base::half_of, Base::staged
