#pragma once
// The Hopper GEMM machinery (sm_90a and its CPU emulation), with the interface
// of TiledGemm so the MoE stages use either: a block of one to three
// consumer warpgroups computes a tile_m x tile_n tile of A (gathered rows) times NB weight
// matrices. The NB weight tiles sit side by side in shared memory and one
// wgmma m64nNk16 (N = NB * tile_n) covers them all, so stage 1's gate and up
// accumulators of a (row, column) land in the same lane.
//
// Tiles are 64 elements (128 bytes) deep in k, written by cp.async straight
// into the 128-byte swizzled layout wgmma reads (atom_wgmma.hpp), in a ring
// of `stages` buffers. Loads run stages - 1 k-tiles ahead of the math: after
// a k-tile's wgmma are issued, a second barrier confirms every warpgroup has
// finished the previous k-tile, whose buffer then takes the next copy while
// this k-tile computes. (Profiling showed the tensor pipe waiting on loads,
// not on L2 bandwidth, so depth in flight is what pays.) Warp-specialised
// blocks (Cfg::warp_specialized) instead give all copies to one extra
// producer warpgroup and meet the consumers at mbarriers (run_specialized):
// its lanes copy the gathered A rows with cp.async, and one lane moves each
// weight tile with a single bulk copy (the TMA unit) from weights stored in
// the tiled layout (weight_layout.hpp), where a tile is already the
// swizzled shared-memory image, or (WeightLayout::mapped) with one tensor-map
// load per weight tile from the plain weights, the TMA unit laying the box out
// in the swizzle (map_weights; moe_mapped_args.hpp). Their ring runs on
// across the tiles of a persistent block (Cfg::tiles_per_block > 1,
// tile_order.hpp).
//
// fp8 (e4m3 atoms): a 128-byte row holds 128 codes, so k-tiles are 128 deep
// and one k32 wgmma reads the same 32 bytes of a row as a bf16 k16. With
// PromoteEvery = n > 0 each k-tile is one 128-deep scale group, and after
// every n-th k-tile (and the last) its wgmma retire (wait 0) and the
// accumulators are multiplied by the group's scales and added into a second
// set (run_scaled), which acc_at reads; n > 1 only with scales constant along
// k (UnitScales, moe_scales.hpp). PromoteEvery = 0: one set (run), the
// scales applied by the epilogue ("fast accumulation"). Promotion runs in
// both forms; in a producer warpgroup's consumers (run_specialized) a
// warpgroup that waits for its k-tile's wgmma and promotes them releases the
// stage first and meets no other warpgroup, so the other consumers' wgmma keep
// the tensor cores busy through its promotion. Either form loads the group's
// scales before the wait, so their latency hides behind the k-tile's wgmma.
//
// Ping-pong (Cfg::pingpong; persistent producer blocks with two consumer
// warpgroups, no promotion): each consumer warpgroup computes whole tiles,
// the block's tiles alternating between them (the j-th tile it runs goes to
// warpgroup j % 2), so one warpgroup's epilogue runs while the other's
// wgmma keep the tensor cores busy. The producer fills the one ring with the
// tiles' k-tiles in order; two mbarriers hand the turn over
// (PingPongTurns): the warpgroup of tile j starts waiting on the ring only
// once the other has passed the last "full" wait of tile j - 1, which keeps
// every wait within one phase of its mbarrier (a wait on parity alone cannot
// tell a phase from the one two later).
//
// Register rebalance (Cfg::rebalance, "_rb"; persistent producer blocks with
// two or three consumer warpgroups): the kernel starts with the register file
// split evenly over the block's threads (FT_KERNEL_REBALANCED: one block per
// SM, so 128 a lane for 512 threads), then the producer warpgroup gives
// registers back (setmaxnreg.dec to RegisterSplit::kProducer, shape_rules.hpp)
// and the consumers take them (setmaxnreg.inc to RegisterSplit::consumer), so
// three consumers can hold 128 accumulators each (m192 tiles with N = 256: a
// fifth less operand traffic per FLOP than m128). What ptxas (CUDA 13.0)
// needs for that, each found by compiling: the two roles' code in disjoint
// regions (run_tiles compiles a copy of the tile code per role, lanes.hpp);
// a producer that fits 32 registers (its A-row pointers in shared memory,
// pointer_table); and no wgmma wider than N = 128 (kInstrN: ptxas checks each
// instruction's operands against the entry count, not the region's).
namespace ft {

// Cfg::pingpong (the wgmma family's axis, generator/families/wgmma.cpp);
// false for Configs without the member.
template <class Cfg>
FT_HOST_DEVICE constexpr bool pingpong_of() {
  if constexpr (requires { Cfg::pingpong; }) return Cfg::pingpong;
  else return false;
}

// Cfg::rebalance (the wgmma family's wgmma_regs axis); false for Configs
// without the member.
template <class Cfg>
FT_HOST_DEVICE constexpr bool rebalance_of() {
  if constexpr (requires { Cfg::rebalance; }) return Cfg::rebalance;
  else return false;
}

// Cfg::dynamic_tiles (the wgmma family's wgmma_sched axis: persistent blocks
// take their tiles by tickets, tile_order.hpp); false for Configs without the member.
template <class Cfg>
FT_HOST_DEVICE constexpr bool dynamic_tiles_of() {
  if constexpr (requires { Cfg::dynamic_tiles; }) return Cfg::dynamic_tiles;
  else return false;
}

template <class Cfg, int NB, int PromoteEvery = 0>
struct WgmmaGemm;

#if defined(FT_FLAVOUR_CUDA) || defined(FT_FLAVOUR_EMU)
// The ping-pong hand-off on the two "turn" mbarriers (128 arrivals each: one
// consumer warpgroup): before its mainloop the warpgroup of the block's j-th
// tile (j > 0) waits for phase (j - 1) / 2 of turns[j % 2]; after its last
// "full" wait it arrives on turns[(j + 1) % 2], the other's. A struct so a
// test can replace it for one Config (tests/emu: the hand-off dropped fails).
template <class Cfg>
struct PingPongTurns {
  FT_DEVICE static void wait(u64* turns, int j) {
    if (j > 0) mbarrier_wait(&turns[j % 2], ((j - 1) / 2) & 1);
  }
  FT_DEVICE static void pass(u64* turns, int j) { mbarrier_arrive(&turns[(j + 1) % 2]); }
};

template <class Cfg, int NB, int PromoteEvery>
struct WgmmaGemm {
  static constexpr bool Promote = PromoteEvery > 0;
  using Atom = typename Cfg::Atom;
  using Operand = typename Atom::storage;  // one operand element: u16, or u8 for fp8
  static constexpr int TM = Cfg::tile_m, TN = Cfg::tile_n, TK = Cfg::tile_k;
  static constexpr int kChunkElems = 16 / int(sizeof(Operand));  // elements per 16-byte chunk
  // Warp-specialised blocks add one producer warpgroup (the last) that only
  // copies, and read tiled weights by bulk copy; otherwise every thread
  // copies and computes, and weights are plain.
  static constexpr bool kSpecialized = Cfg::warp_specialized;
  static constexpr int kConsumers = Cfg::warps_m * Cfg::warps_n / 4;  // warpgroups running wgmma
  static constexpr int kThreads = (kConsumers + (kSpecialized ? 1 : 0)) * 128;
  static constexpr int kLoaders = kSpecialized ? 128 : kThreads;  // threads issuing the copies
  static constexpr bool kPingPong = pingpong_of<Cfg>();  // consumer warpgroups take whole tiles in turn
  static constexpr bool kRebalance = rebalance_of<Cfg>();  // setmaxnreg moves registers from producer to consumers
  static constexpr int kGroupRows = kPingPong ? TM : TM / kConsumers;  // rows of A each consumer warpgroup owns
  static constexpr int RM = kGroupRows / 64;           // 64-row wgmma blocks per warpgroup
  static constexpr int kN = NB * TN;                   // the weight tiles' columns side by side
  static constexpr int kInstrN = kRebalance && kN > 128 ? 128 : kN;  // one wgmma's N (a rebalanced block: at most 128, see below)
  static constexpr int RN = TN / 8;                    // 8-column accumulator blocks per weight matrix
  static constexpr int kCRegs = 4;                     // accumulators per lane per 8-column block
  static constexpr bool kPairedColumns = true;         // 2j, 2j+1: columns c, c+1 of one row
  static constexpr int kTileGroup = 8;                 // grid walk (tile_order.hpp): bands of 8 column tiles
  static constexpr int kRows = TM + kN;                // shared-memory rows per stage: A, then weights
  static constexpr int kStageBytes = kRows * 128;
  // A full and an empty mbarrier per stage; ping-pong adds the two turn mbarriers.
  static constexpr int kBarrierBytes = kSpecialized ? 2 * Cfg::stages * 8 + (kPingPong ? 16 : 0) : 0;
  static constexpr int kCopiedRows = kSpecialized ? TM : kRows;  // rows copied 16 bytes at a time: bulk copies move the weights
  static constexpr int kChunksPerThread = kCopiedRows * 8 / kLoaders;
  // A rebalanced producer keeps its copies' source pointers in shared memory
  // (after the mbarriers, one per chunk, each lane reading back only its own),
  // not in registers: it runs on RegisterSplit::kProducer of them.
  static constexpr int kPointerTableBytes = kRebalance ? kChunksPerThread * kLoaders * 8 : 0;
  // A dynamic walk's ticket ring (tile_order.hpp, for_each_ticket): a full
  // and an empty mbarrier and a slot per ticket in flight, after the pointer table.
  static constexpr bool kDynamic = dynamic_tiles_of<Cfg>();
  static constexpr int kTicketSlots = 4;
  static constexpr int kTicketBytes = kDynamic ? kTicketSlots * (8 + 8 + 4) : 0;
  static constexpr int kSmemBytes =
      Cfg::stages * kStageBytes + 1024 + kBarrierBytes + kPointerTableBytes + kTicketBytes;  // + room to align to 1024
  static constexpr u32 kWeightTileBytes = TN * 128;
  static constexpr int kRowStep = kLoaders / 8;  // rows between one thread's consecutive chunks

  static_assert(Atom::kWarpgroup, "WgmmaGemm takes a wgmma atom");
  static_assert(Cfg::warps_n == 1 && Cfg::warps_m % 4 == 0, "whole warpgroups stacked along M");
  static_assert(TK * int(sizeof(Operand)) == 128, "k-tiles are one 128-byte swizzle row deep");
  static_assert(PromoteEvery >= 0, "promote every n >= 1 k-tiles, or never (0)");
  static_assert(!Promote || TK == kScaleGroup, "promotion: one 128-deep scale group per k-tile");
  static_assert(kGroupRows % 64 == 0, "each warpgroup owns whole 64-row wgmma blocks");
  static_assert(wgmma_n_supported(kN), "the wgmma atoms here take N = 32, 64, 128 or 256");
  static_assert(Cfg::stages >= 3, "at least two k-tiles in flight");
  static_assert(kRowStep % 8 == 0, "a thread's chunks keep one swizzle phase");
  static_assert(kCopiedRows * 8 % kLoaders == 0, "every loading thread copies the same number of chunks");
  static constexpr bool kMapped = Cfg::layout == WeightLayout::mapped;  // weight tiles by tensor map
  static_assert(kSpecialized ? (Cfg::layout == WeightLayout::tiled || kMapped) : Cfg::layout == WeightLayout::plain,
                "the shared ring reads plain K-major weights, the producer warpgroup tiled ones or a tensor map");
  static_assert(!kPingPong || (kSpecialized && Cfg::tiles_per_block > 1 && kConsumers == 2 && !Promote),
                "ping-pong: persistent producer blocks, two consumer warpgroups, no promotion");
  static_assert(!kRebalance || (kSpecialized && Cfg::tiles_per_block > 1 && kConsumers >= 2),
                "register rebalance: persistent producer blocks (the roles split in run_tiles), two or three consumers");
  static_assert(!kDynamic || (kSpecialized && Cfg::tiles_per_block > 1),
                "a dynamic tile walk: persistent producer blocks (one producer lane takes the tickets)");

  float acc[RM][kN / 2];
  float total[Promote ? RM : 1][Promote ? kN / 2 : 1];  // promoted sums
  // Row start (plus this thread's chunk) of each copy; null: zero row (a rebalanced block: pointer_table()).
  const Operand* src[kRebalance ? 1 : kChunksPerThread];
  const Operand* weight_tile[NB];        // bulk copies: each weight tile's first 64-deep slice
  long long weight_slice = 0;        // elements from one 64-deep slice of a tiled weight to the next
  // kMapped: the weights' tensor map (in the kernel's parameter space) and
  // each weight tile's first row in the matrix it maps.
  const TensorMap* weight_map = nullptr;
  int weight_row[NB] = {};
  int issued = 0;                    // k-tiles this block's ring has taken so far (specialised blocks)
  int turn = 0;                      // ping-pong: the block's tiles run so far
  bool mine = true;                  // ping-pong: this warpgroup computes the current tile

  FT_DEVICE float& acc_at(int nb, int rm, int rn, int i) {
    if constexpr (Promote) return total[rm][(nb * RN + rn) * 4 + i];
    else return acc[rm][(nb * RN + rn) * 4 + i];
  }

  static constexpr bool kProducerWarpgroup = kSpecialized;  // run_tiles splits a persistent block's lanes

  // Whether this thread holds accumulators (the producer warpgroup does not);
  // known at compile time in a copy of the code for one role (lanes.hpp).
  template <class Lanes = AllLanes>
  FT_DEVICE static bool holds_results(Lanes = {}) {
    if constexpr (!kSpecialized || !Lanes::produces) return true;
    else if constexpr (!Lanes::consumes) return false;
    else return thread_index() < kConsumers * 128;
  }
  // Whether this thread holds the current tile's results: a consumer's, and
  // in ping-pong only the warpgroup whose turn the tile was.
  template <class Lanes = AllLanes>
  FT_DEVICE bool holds_tile(Lanes lanes = {}) const { return holds_results(lanes) && (!kPingPong || mine); }
  // The warpgroup's first row in the tile (ping-pong: every warpgroup has all of them).
  FT_DEVICE static int group_row0() { return kPingPong ? 0 : thread_index() / 128 * kGroupRows; }
  // This thread's index among the copying threads, or -1.
  FT_DEVICE static int loader_index() {
    const int tid = thread_index();
    if constexpr (kSpecialized) return tid >= kConsumers * 128 ? tid - kConsumers * 128 : -1;
    return tid;
  }

  // a_row(r): start of gathered row r of A (or nullptr for a padding row);
  // b_at(nb, r, k): element (r, k) of weight matrix nb's tile in its layout;
  // kMapped: the mapped matrix's first element and row length (`cols`
  // elements), from which each tile's row in the map follows (passed per
  // tile, not kept: a rebalanced producer runs on 32 registers).
  template <class ARow, class BAt>
  FT_DEVICE void setup(ARow a_row, BAt b_at, const void* weight_base = nullptr, long long weight_cols = 1) {
    const int l = loader_index();
    if (l < 0) return;
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int row = l / 8 + j * kRowStep;
      const Operand* p = row < TM ? a_row(row) : b_at((row - TM) / TN, (row - TM) % TN, 0);
      set_source(l, j, p ? p + (l % 8) * kChunkElems : nullptr);
    }
    if constexpr (kMapped) {
      FT_UNROLL for (int nb = 0; nb < NB; ++nb)
        weight_row[nb] = int((b_at(nb, 0, 0) - static_cast<const Operand*>(weight_base)) / weight_cols);
    } else if constexpr (kSpecialized) {
      FT_UNROLL for (int nb = 0; nb < NB; ++nb) weight_tile[nb] = b_at(nb, 0, 0);
      weight_slice = b_at(0, 0, TK) - weight_tile[0];
    }
  }

  // kMapped: the tensor map of the (plain) weight matrix b_at points into;
  // once per block, before setup.
  FT_DEVICE void map_weights(const TensorMap* map) { weight_map = map; }

  // Issues this thread's copies of the k-tile starting at k0 into `stage`.
  FT_DEVICE void load(unsigned char* stage, int k0) const {
    const int l = loader_index();
    const int chunk = (l % 8) ^ ((l / 8) % 8);  // the same swizzle phase for all of this thread's rows
    FT_UNROLL for (int j = 0; j < kChunksPerThread; ++j) {
      const int row = l / 8 + j * kRowStep;
      const Operand* from = source(l, j);
      copy_async_16(stage + row * 128 + chunk * 16, from ? from + k0 : source(l, 0), from != nullptr);
    }
  }

  FT_DEVICE void zero_accumulators() {
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int i = 0; i < kN / 2; ++i) acc[rm][i] = 0.0f;
  }

  // One k-tile's wgmma for this warpgroup, from the stage at shared address `stage`.
  FT_DEVICE void mma_tile(u32 stage) {
    const int row0 = group_row0();
    wgmma_fence();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
    FT_UNROLL for (int kk = 0; kk < TK / Atom::K_; ++kk)  // 32 bytes of each row per instruction
      FT_UNROLL for (int rm = 0; rm < RM; ++rm) {
        const u32 a = stage + u32((row0 + rm * 64) * 128 + kk * 32);
        FT_UNROLL for (int j = 0; j < kN / kInstrN; ++j) {
          const u32 b = stage + u32((TM + j * kInstrN) * 128 + kk * 32);
          Atom::template mma<kInstrN>(reinterpret_cast<float(&)[kInstrN / 2]>(acc[rm][j * (kInstrN / 2)]),
                                      wgmma_descriptor(a), wgmma_descriptor(b));
        }
      }
    wgmma_commit();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
  }

  // The 1024-aligned ring in the block's shared window (swizzle and
  // descriptors act on shared addresses), and after it the mbarriers.
  FT_DEVICE static unsigned char* ring() {
    unsigned char* window = shared_memory();
    const u32 window_addr = shared_address(window);
    return window + (((window_addr + 1023u) & ~1023u) - window_addr);
  }
  FT_DEVICE static u64* full_barriers() { return reinterpret_cast<u64*>(ring() + Cfg::stages * kStageBytes); }
  FT_DEVICE static u64* empty_barriers() { return full_barriers() + Cfg::stages; }
  FT_DEVICE static u64* turn_barriers() { return empty_barriers() + Cfg::stages; }  // ping-pong
  FT_DEVICE static const Operand** pointer_table() {
    return reinterpret_cast<const Operand**>(ring() + Cfg::stages * kStageBytes + kBarrierBytes);
  }
  // The ticket ring (kDynamic): kTicketSlots full mbarriers, as many empty ones, then the slots.
  FT_DEVICE static u64* ticket_full() {
    return reinterpret_cast<u64*>(ring() + Cfg::stages * kStageBytes + kBarrierBytes + kPointerTableBytes);
  }
  FT_DEVICE static i32* ticket_slots() { return reinterpret_cast<i32*>(ticket_full() + 2 * kTicketSlots); }
  // Loader l's source pointer of its j-th chunk: a register, or (kRebalance) its shared-memory slot.
  FT_DEVICE const Operand* source(int l, int j) const {
    if constexpr (kRebalance) return pointer_table()[j * kLoaders + l];
    else return src[j];
  }
  FT_DEVICE void set_source(int l, int j, const Operand* p) {
    if constexpr (kRebalance) pointer_table()[j * kLoaders + l] = p;
    else src[j] = p;
  }

  // Once per block, before its first tile: a specialised block's mbarriers
  // (they, and the k-tile count below, run on across a persistent block's tiles).
  FT_DEVICE void start() {
    if constexpr (kSpecialized) {
      if (thread_index() == 0)
        for (int s = 0; s < Cfg::stages; ++s) {
          mbarrier_init(&full_barriers()[s], kLoaders + 1);  // + the bulk copies' issuer
          mbarrier_init(&empty_barriers()[s], (kPingPong ? 1 : kConsumers) * 128);  // the warpgroups computing a k-tile
        }
      if (kPingPong && thread_index() == 0)
        for (int w = 0; w < 2; ++w) mbarrier_init(&turn_barriers()[w], 128);
      if (kDynamic && thread_index() == 0)
        for (int s = 0; s < kTicketSlots; ++s) {
          mbarrier_init(&ticket_full()[s], 1);                   // the lane that took the ticket
          mbarrier_init(&ticket_full()[kTicketSlots + s], kThreads);  // every lane, once it has read it
        }
      barrier();
    }
  }

  // Ends a producer lane that has issued its last copies (see producer_exit).
  FT_DEVICE static void leave() { producer_exit(); }

  // The two roles' register counts (kRebalance; every lane of the warpgroup
  // calls its role's, run_tiles); no-ops otherwise.
  FT_DEVICE static void producer_registers() {
    if constexpr (kRebalance) registers_decrease<RegisterSplit::kProducer>();
  }
  FT_DEVICE static void consumer_registers() {
    if constexpr (kRebalance) registers_increase<RegisterSplit::consumer(kConsumers)>();
  }

  // Accumulates A[:, k_begin:k_end] x B^T into acc; every thread of the block
  // calls it (a producer warpgroup only copies).
  template <class Lanes = AllLanes>
  FT_DEVICE void run(int k_begin, int k_end, Lanes lanes = {}) {
    static_assert(!Promote, "a promoting GEMM runs with its scales (run_scaled)");
    unsigned char* r = ring();
    const u32 ring_addr = shared_address(r);
    const int tiles = (k_end - k_begin) / TK;
    if constexpr (kPingPong) {
      if (holds_results(lanes)) {
        mine = turn % 2 == thread_index() / 128;
        ++turn;
        if (!mine) {  // the other warpgroup's tile: only the ring's k-tile count moves on
          issued += tiles;
          return;
        }
      }
    }
    if constexpr (Lanes::consumes) zero_accumulators();
    if constexpr (kSpecialized)
      run_specialized(r, ring_addr, k_begin, tiles, static_cast<const int*>(nullptr), lanes);
    else
      run_together(r, ring_addr, k_begin, tiles, static_cast<const int*>(nullptr));
  }

  // With Promote: after k-tile t (128-deep group g = (k_begin + t TK) / 128)
  // retires, total += acc x ks.a(row, g) x ks.w(nb, g), then acc = 0; with
  // PromoteEvery = n > 1 after every n-th k-tile and the last (the scales
  // are the same for every group, so acc may hold n groups' sums).
  template <class KScales, class Lanes = AllLanes>
  FT_DEVICE void run_scaled(int k_begin, int k_end, const KScales& ks, Lanes lanes = {}) {
    static_assert(Promote, "run_scaled promotes");
    static_assert(PromoteEvery == 1 || requires { KScales::kConstantAlongK; },
                  "promoting every n > 1 k-tiles needs scales constant along k");
    unsigned char* r = ring();
    if constexpr (Lanes::consumes) {
      zero_accumulators();
      FT_UNROLL for (int rm = 0; rm < RM; ++rm)
        FT_UNROLL for (int i = 0; i < kN / 2; ++i) total[rm][i] = 0.0f;
    }
    if constexpr (kSpecialized)
      run_specialized(r, shared_address(r), k_begin, (k_end - k_begin) / TK, &ks, lanes);
    else
      run_together(r, shared_address(r), k_begin, (k_end - k_begin) / TK, &ks);
  }

  // One group's scales as this lane applies them: its two rows per 64-row
  // block (a) and each weight matrix's (w).
  struct GroupScales {
    float a[RM][2];
    float w[NB];
  };
  template <class KScales>
  FT_DEVICE static GroupScales group_scales(const KScales& ks, int g) {
    GroupScales s;
    FT_UNROLL for (int nb = 0; nb < NB; ++nb) s.w[nb] = ks.w(nb, g);
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) {
      s.a[rm][0] = ks.a(acc_row(rm, 0), g);
      s.a[rm][1] = ks.a(acc_row(rm, 2), g);
    }
    return s;
  }

  // The group's scales into total (this warpgroup's wgmma of the k-tile have retired).
  FT_DEVICE void promote(const GroupScales& s) {
    FT_UNROLL for (int rm = 0; rm < RM; ++rm)
      FT_UNROLL for (int i = 0; i < kN / 2; ++i) {
        total[rm][i] += acc[rm][i] * s.a[rm][(i / 2) % 2] * s.w[i / (RN * 4)];
        acc[rm][i] = 0.0f;
      }
  }

  // Every thread copies and computes; two block barriers per k-tile. `ks`:
  // null, or the scales to promote each k-tile with (Promote).
  template <class KScales>
  FT_DEVICE void run_together(unsigned char* ring, u32 ring_addr, int k_begin, int tiles, const KScales* ks) {
    constexpr int S = Cfg::stages;
    FT_UNROLL for (int s = 0; s < S - 1; ++s) {
      if (s < tiles) load(ring + s * kStageBytes, k_begin + s * TK);
      copy_async_commit();  // empty groups keep the count uniform
    }
    // K is at least one k-tile (legality): as in run_specialized, a zero-tile
    // path would take its zeroed accumulators to the final wait past the
    // in-flight wgmma, and ptxas would serialise every wgmma (C7515; seen on
    // the non-promoting e4m3 stage 1).
    if (tiles < 1) __builtin_unreachable();
    for (int t = 0; t < tiles; ++t) {
      copy_async_wait<S - 2>();  // this thread's copies of tile t have landed
      fence_async_proxy();
      barrier();                 // everyone's have
      mma_tile(ring_addr + u32((t % S) * kStageBytes));
      if constexpr (Promote) {
        if ((t + 1) % PromoteEvery == 0 || t + 1 == tiles) {
          const GroupScales sc = group_scales(*ks, (k_begin + t * TK) / kScaleGroup);  // loads under the wgmma
          wgmma_wait<0>();  // tile t's wgmma are done: promote them
          FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
          promote(sc);
        } else {
          wgmma_wait<1>();
        }
      } else {
        wgmma_wait<1>();  // this warpgroup's tile t - 1 wgmma are done
      }
      barrier();        // every warpgroup's are: tile t - 1's buffer is free while tile t computes
      const int next = t + S - 1;
      if (next < tiles) load(ring + (next % S) * kStageBytes, k_begin + next * TK);
      copy_async_commit();
    }
    wgmma_wait<0>();
    FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
  }

  // The producer warpgroup copies, the consumer warpgroups compute; they meet
  // only at a "full" and an "empty" mbarrier per stage, so neither ever waits
  // at a block barrier. A stage's "full" phase completes when each producer
  // lane's A copies have landed (its cp.async arrival) and the bytes of the
  // weight tiles' bulk copies, announced by the issuing lane, are in. The
  // producer runs ahead until the ring is full, then refills a stage as soon
  // as the consumers release it -- across tiles too: `issued` counts this
  // block's k-tiles, so a persistent block's producer already fills the ring
  // with the next tile while the consumers store this one. `ks`: null, or
  // the scales to promote with (Promote): after a promoting k-tile's wgmma
  // retire (wait 0) its stage is released before the promotion runs.
  template <class KScales, class Lanes>
  FT_DEVICE void run_specialized(unsigned char* ring, u32 ring_addr, int k_begin, int tiles, const KScales* ks, Lanes lanes) {
    constexpr int S = Cfg::stages;
    u64* full = full_barriers();
    u64* empty = empty_barriers();
    const int first = issued;
    issued += tiles;
    if (!holds_results(lanes)) {
      const bool issuer = loader_index() == 0;
      const long long first_slice = k_begin / TK;
      for (int t = 0; t < tiles; ++t) {
        const int n = first + t, s = n % S;
        if (n >= S) mbarrier_wait(&empty[s], (n / S - 1) & 1);  // consumers are done with k-tile n - S
        unsigned char* stage = ring + s * kStageBytes;
        if (issuer) {
          mbarrier_arrive_expect_tx(&full[s], NB * kWeightTileBytes);
          FT_UNROLL for (int nb = 0; nb < NB; ++nb) {
            unsigned char* to = stage + (TM + nb * TN) * 128;
            if constexpr (kMapped) tensor_load_2d(to, weight_map, k_begin + t * TK, weight_row[nb], &full[s]);
            else bulk_copy(to, weight_tile[nb] + (first_slice + t) * weight_slice, kWeightTileBytes, &full[s]);
          }
        }
        load(stage, k_begin + t * TK);
        copy_async_arrive(&full[s]);
      }
      // A one-tile block's producer is done: leaving here keeps its path
      // out of the epilogue's register allocation.
      if constexpr (Cfg::tiles_per_block <= 1) producer_exit();
      return;
    }
    // K is at least one k-tile (legality), and saying so keeps the compiler
    // from a zero-tile path whose zeroed accumulators meet the in-flight
    // wgmma at the final wait (ptxas would then serialise every wgmma: C7515).
    if (tiles < 1) __builtin_unreachable();
    if constexpr (Promote) {
      int released = first;  // k-tiles of this block before `released` are back with the producer
      for (int t = 0; t < tiles; ++t) {
        const int n = first + t;
        mbarrier_wait(&full[n % S], (n / S) & 1);
        fence_async_proxy();
        mma_tile(ring_addr + u32((n % S) * kStageBytes));
        if ((t + 1) % PromoteEvery == 0 || t + 1 == tiles) {
          const GroupScales sc = group_scales(*ks, (k_begin + t * TK) / kScaleGroup);  // loads under the wgmma
          wgmma_wait<0>();  // k-tile n's wgmma are done: its stage is free, then promote
          for (; released <= n; ++released) mbarrier_arrive(&empty[released % S]);
          FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
          promote(sc);
        } else {
          wgmma_wait<1>();  // k-tile n - 1's wgmma are done
          for (; released < n; ++released) mbarrier_arrive(&empty[released % S]);
        }
      }
      return;  // the last k-tile promoted: every stage is released
    } else {
      if constexpr (kPingPong) PingPongTurns<Cfg>::wait(turn_barriers(), turn - 1);
      for (int t = 0; t < tiles; ++t) {
        const int n = first + t;
        mbarrier_wait(&full[n % S], (n / S) & 1);
        fence_async_proxy();  // the A rows came through the generic proxy; wgmma reads through the async one
        mma_tile(ring_addr + u32((n % S) * kStageBytes));
        wgmma_wait<1>();                                      // k-tile n - 1's wgmma are done
        if (t > 0) mbarrier_arrive(&empty[(n - 1) % S]);  // its buffer may take a new k-tile
      }
      if constexpr (kPingPong) PingPongTurns<Cfg>::pass(turn_barriers(), turn - 1);  // past its last full wait
      wgmma_wait<0>();
      mbarrier_arrive(&empty[(first + tiles - 1) % S]);  // the last one's too (a persistent block's next tile)
      FT_UNROLL for (int rm = 0; rm < RM; ++rm) wgmma_fence_operands(acc[rm]);
    }
  }

  // Tile coordinates of accumulator acc_at(nb, rm, rn, i) of this lane.
  FT_DEVICE static int acc_row(int rm, int i) {
    const int tid = thread_index();
    return group_row0() + rm * 64 + wgmma_acc_row(tid % 128, i);
  }
  // i < 4: within one 8-column block, so the atom layout's column is the offset in it.
  FT_DEVICE static int acc_col(int rn, int i) { return rn * 8 + wgmma_acc_col(thread_index() % 128, i); }
};
#endif

// The GEMM machinery of a stage: by the family of its atom.
template <bool UseFirst, class First, class Second>
struct SelectType {
  using type = First;
};
template <class First, class Second>
struct SelectType<false, First, Second> {
  using type = Second;
};
// PromoteEvery: as WgmmaGemm's; the tiled machinery promotes every 128-deep
// group or never (1 or 0).
template <class Cfg, int NB, int PromoteEvery = 0>
using GemmFor = typename SelectType<Cfg::Atom::kWarpgroup, WgmmaGemm<Cfg, NB, PromoteEvery>,
                                    TiledGemm<Cfg, NB, (PromoteEvery > 0)>>::type;

}  // namespace ft
