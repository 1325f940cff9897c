#pragma once
// The tiled machinery both MoE stages share: a block computes a tile_m x tile_n
// tile of A (gathered rows) times NB weight matrices, staging tile_k-wide slices
// through LDS / shared memory (one buffer, or two in ping-pong), each warp
// computing a (tile_m/warps_m) x (tile_n/warps_n) sub-tile with repeated atoms.
// Kernels see this, not the atoms' registers.
//
// Operands are the atom's storage (16-bit values, or fp8 codes: a 16-byte
// chunk holds 8 or 16 of them). With Promote (fp8 layers whose scales change
// along k, templates/ft/moe_args.hpp), the accumulators of each 128-deep k
// group are multiplied by that group's scales and added into a second set
// (promote), which acc_at then reads: run_scaled.
namespace ft {

// The main loop over the k-slices k0 = k_begin, k_begin + TK, ... < k_end of a
// GEMM staged through LDS: fetch(k0) loads a slice into registers, store(buf)
// puts it into LDS, compute(buf, k0) runs the atoms on it. With two LDS stages
// (StageElems apart) the next slice's loads overlap this slice's math. The
// bounds are uniform across the block. The tiled machinery's (TiledGemm) and
// the backward's GEMMs' (staged_gemm.hpp).
template <int Stages, int TK, int StageElems, class S, class Fetch, class Store, class Compute>
FT_DEVICE void k_slices(S* lds, int k_begin, int k_end, Fetch fetch, Store store, Compute compute) {
  if constexpr (Stages == 1) {
    for (int k0 = k_begin; k0 < k_end; k0 += TK) {
      fetch(k0);
      store(lds);
      barrier();
      compute(lds, k0);
      barrier();
    }
  } else {
    fetch(k_begin);
    store(lds);
    barrier();
    int cur = 0;
    for (int k0 = k_begin; k0 < k_end; k0 += TK) {
      const bool more = k0 + TK < k_end;
      if (more) fetch(k0 + TK);  // next slice's loads overlap this slice's math
      compute(lds + cur * StageElems, k0);
      if (more) store(lds + (cur ^ 1) * StageElems);
      barrier();
      cur ^= 1;
    }
  }
}

template <class Cfg, int NB, bool Promote = false>
struct TiledGemm {
  using Atom = typename Cfg::Atom;
  using S = typename Atom::storage;  // one operand element: u16, or u8 for fp8
  static constexpr int TM = Cfg::tile_m, TN = Cfg::tile_n, TK = Cfg::tile_k;
  static constexpr int WM = Cfg::warps_m, WN = Cfg::warps_n;
  static constexpr int kLanes = Atom::lanes;
  static constexpr int kThreads = WM * WN * kLanes;
  static constexpr int WTM = TM / WM, WTN = TN / WN;
  static constexpr int RM = WTM / Atom::M, RN = WTN / Atom::N;
  static constexpr int kChunkElems = 16 / int(sizeof(S));  // elements per 16-byte chunk
  // One 16-byte pad per LDS row spreads rows over banks.
  static constexpr int kRowElems = TK + kChunkElems;
  static constexpr int kRows = TM + NB * TN;
  static constexpr int kStageElems = kRows * kRowElems;
  static constexpr int kSmemBytes = Cfg::stages * kStageElems * int(sizeof(S));
  static constexpr int kChunksPerRow = TK / kChunkElems;
  static constexpr int kChunks = kRows * kChunksPerRow;
  static constexpr int kChunksPerThread = (kChunks + kThreads - 1) / kThreads;
  // Elements between consecutive k chunks of one weight row (shuffled: 16 rows of chunks apart).
  static constexpr int kBStep = Cfg::layout == WeightLayout::plain ? kChunkElems : 16 * kChunkElems;

  static_assert(TM % (WM * Atom::M) == 0, "tile_m must split into warps_m x atom M");
  static_assert(TN % (WN * Atom::N) == 0, "tile_n must split into warps_n x atom N");
  static_assert(TK % Atom::K == 0 && TK % kChunkElems == 0, "tile_k must be a multiple of the atom K and of a 16-byte chunk");
  static_assert(!Promote || kScaleGroup % TK == 0, "promoted k groups are whole k-tiles");
  static_assert(Cfg::stages == 1 || Cfg::stages == 2, "single or ping-pong LDS");
  static_assert(Atom::a_regs % Atom::a_contig == 0 && Atom::b_regs % Atom::b_contig == 0);

  static constexpr int kCRegs = Atom::c_regs;  // accumulators per lane per atom
  static constexpr int kTileGroup = 1;         // grid walk (tile_order.hpp): plain
  // Accumulators 2j and 2j+1 of a lane are columns c, c+1 of one row (mma.sync), so
  // epilogues may store them as a pair; MFMA lanes hold runs of rows instead.
  static constexpr bool kPairedColumns = Atom::c_regs % 2 == 0 && Atom::c_row(0, 1) == Atom::c_row(0, 0) &&
                                         Atom::c_col(0, 1) == Atom::c_col(0, 0) + 1 && Atom::c_col(0, 0) % 2 == 0;

  float acc[NB][RM][RN][Atom::c_regs];
  float total[Promote ? NB : 1][Promote ? RM : 1][Promote ? RN : 1][Promote ? Atom::c_regs : 1];  // promoted sums
  const S* src[kChunksPerThread];  // row start of each chunk this thread copies (null: zero row)
  int step[kChunksPerThread];
  Chunk16 staged[kChunksPerThread];

  FT_DEVICE float& acc_at(int nb, int rm, int rn, int i) {
    if constexpr (Promote) return total[nb][rm][rn][i];
    else return acc[nb][rm][rn][i];
  }
  static constexpr bool kProducerWarpgroup = false;       // every thread copies and computes
  FT_DEVICE static bool holds_results() { return true; }  // every thread computes
  template <class Lanes = AllLanes>
  FT_DEVICE bool holds_tile(Lanes = {}) const { return true; }
  FT_DEVICE void start() {}  // nothing lives across tiles
  FT_DEVICE static void leave() {}  // no producer warpgroup here

  // a_row(r): start of gathered row r of A (or nullptr for a padding row);
  // b_at(nb, r, k): element (r, k) of weight matrix nb's tile in its layout.
  template <class ARow, class BAt>
  FT_DEVICE void setup(ARow a_row, BAt b_at, const void* = nullptr, long long = 1) {  // + WgmmaGemm's mapped matrix: unused
    FT_UNROLL for (int nb = 0; nb < NB; ++nb)
      FT_UNROLL for (int rm = 0; rm < RM; ++rm)
        FT_UNROLL for (int rn = 0; rn < RN; ++rn)
          FT_UNROLL for (int i = 0; i < Atom::c_regs; ++i) {
            acc[nb][rm][rn][i] = 0.0f;
            if constexpr (Promote) total[nb][rm][rn][i] = 0.0f;
          }
    const int tid = thread_index();
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = tid + j * kThreads;
      const int row = c / kChunksPerRow;
      src[j] = nullptr;
      step[j] = kChunkElems;  // an A row's chunks are contiguous
      if (c < kChunks) {
        if (row < TM) {
          src[j] = a_row(row);
        } else {
          src[j] = b_at((row - TM) / TN, (row - TM) % TN, 0);
          step[j] = kBStep;
        }
      }
    }
  }

  // Copies the k-slice starting at k0 into registers (global loads in flight).
  FT_DEVICE void fetch(int k0) {
    const int tid = thread_index();
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = tid + j * kThreads;
      const int kc = c % kChunksPerRow;
      staged[j] = (c < kChunks && src[j])
                      ? *reinterpret_cast<const Chunk16*>(src[j] + (long long)(k0 / kChunkElems + kc) * step[j])
                      : zero_chunk();
    }
  }

  FT_DEVICE void store(S* buf) {
    const int tid = thread_index();
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int c = tid + j * kThreads;
      if (c < kChunks)
        *reinterpret_cast<Chunk16*>(buf + (c / kChunksPerRow) * kRowElems + (c % kChunksPerRow) * kChunkElems) = staged[j];
    }
  }

  FT_DEVICE void compute(const S* buf) {
    const int tid = thread_index();
    const int lane = tid % kLanes, warp = tid / kLanes;
    const int wm0 = (warp / WN) * WTM, wn0 = (warp % WN) * WTN;
    FT_UNROLL for (int kk = 0; kk < TK; kk += Atom::K) {
      S af[RM][Atom::a_regs];
      FT_UNROLL for (int rm = 0; rm < RM; ++rm)
        FT_UNROLL for (int i = 0; i < Atom::a_regs; i += Atom::a_contig) {
          const int r = wm0 + rm * Atom::M + Atom::a_row(lane, i);
          copy_bytes<S, Atom::a_contig>(&af[rm][i], buf + r * kRowElems + kk + Atom::a_k(lane, i));
        }
      FT_UNROLL for (int nb = 0; nb < NB; ++nb) {
        S bf[RN][Atom::b_regs];
        FT_UNROLL for (int rn = 0; rn < RN; ++rn)
          FT_UNROLL for (int i = 0; i < Atom::b_regs; i += Atom::b_contig) {
            const int r = TM + nb * TN + wn0 + rn * Atom::N + Atom::b_col(lane, i);
            copy_bytes<S, Atom::b_contig>(&bf[rn][i], buf + r * kRowElems + kk + Atom::b_k(lane, i));
          }
        FT_UNROLL for (int rm = 0; rm < RM; ++rm)
          FT_UNROLL for (int rn = 0; rn < RN; ++rn) Atom::mma(acc[nb][rm][rn], af[rm], bf[rn]);
      }
    }
  }

  // Accumulates A[:, k_begin:k_end] x B^T into acc.
  template <class Lanes = AllLanes>
  FT_DEVICE void run(int k_begin, int k_end, Lanes = {}) {
    static_assert(!Promote, "a promoting GEMM runs with its scales (run_scaled)");
    run_scaled(k_begin, k_end, 0);
  }

  // With Promote: after the k-tile that ends each 128-deep group g (or the
  // range), total +=
  // acc x ks.a(row, g) x ks.w(nb, g) for every accumulator, then acc = 0
  // (ks.a: the A scale of a tile row; ks.w: weight matrix nb's scale).
  template <class KScales, class Lanes>
  FT_DEVICE void run_scaled(int k_begin, int k_end, const KScales& ks, Lanes) {
    run_scaled(k_begin, k_end, ks);  // every thread copies and computes
  }
  template <class KScales>
  FT_DEVICE void run_scaled(int k_begin, int k_end, const KScales& ks) {
    k_slices<Cfg::stages, TK, kStageElems>(
        reinterpret_cast<S*>(shared_memory()), k_begin, k_end, [&](int k0) { fetch(k0); }, [&](S* buf) { store(buf); },
        [&](const S* buf, int k0) {
          compute(buf);
          if constexpr (Promote) promote_after(ks, k0, k_end);
        });
  }

  // Promotes the group that the k-tile at k0 ends, if it ends one, or the
  // part of it this range holds when the range ends first (a split-K slice
  // shorter than a group, or ending inside one).
  template <class KScales>
  FT_DEVICE void promote_after(const KScales& ks, int k0, int k_end) {
    if ((k0 + TK) % kScaleGroup != 0 && k0 + TK < k_end) return;
    const int g = k0 / kScaleGroup;
    float w[NB];
    FT_UNROLL for (int nb = 0; nb < NB; ++nb) w[nb] = ks.w(nb, g);
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int i = 0; i < Atom::c_regs; ++i) {
        const float a = ks.a(acc_row(rm, i), g);
        FT_UNROLL for (int nb = 0; nb < NB; ++nb)
          FT_UNROLL for (int rn = 0; rn < RN; ++rn) {
            if constexpr (Promote) total[nb][rm][rn][i] += acc[nb][rm][rn][i] * (a * w[nb]);
            acc[nb][rm][rn][i] = 0.0f;
          }
      }
  }

  // Tile coordinates of accumulator slot acc[nb][rm][rn][i] of this lane.
  FT_DEVICE static int acc_row(int rm, int i) {
    const int tid = thread_index();
    return (tid / kLanes / WN) * WTM + rm * Atom::M + Atom::c_row(tid % kLanes, i);
  }
  FT_DEVICE static int acc_col(int rn, int i) {
    const int tid = thread_index();
    return (tid / kLanes % WN) * WTN + rn * Atom::N + Atom::c_col(tid % kLanes, i);
  }
};

}  // namespace ft
