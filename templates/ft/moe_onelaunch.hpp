#pragma once
// The one-launch decode layer (docs/ONELAUNCH.md): the whole MoE layer at small
// T as one persistent kernel, with no align launch, no reduce launch, no grid
// barrier and no host synchronisation.
//
// - Every block aligns the (token, slot) pairs itself, into LDS after its
//   GEMM's area (route): per-expert counts, the padded offsets (a scan over
//   the block), block_experts and sorted_ids, each expert's pairs in
//   ascending pair order, so every block builds the same tables. A by-value
//   copy of MoeArgs points at them, and the stage tiles of moe_stage1.hpp and
//   moe_stage2.hpp run unchanged on it. Block 0 writes the bad-id count and
//   the zero Y rows of tokens with no routed slot.
// - Work by ticket: thread 0 takes atomic_add(ticket, 1). Items [0, R*J1) are
//   stage-1 tiles (row block item / J1, column tile item % J1), the next R*J2
//   stage-2 tiles, row block major (R routed row blocks, J1 = I / tile_n,
//   J2 = H / (2 tile_n): both GEMMs stage tile_m + 2 tile_n rows).
// - Release by arrival counters: a stage-1 tile fences, and thread 0 adds 1 to
//   its row block's counter; a stage-2 tile of row block b starts once that
//   counter holds J1 (thread 0 spins on an acquire load, then a barrier).
//   Deadlock-free for any grid and residency: a stage-2 item waits only for
//   stage-1 items, whose tickets are smaller, so they were taken earlier by
//   blocks that are running or done; stage-1 items wait for nothing. A block
//   alone takes every ticket in order.
// - Stage 2 writes per-slot fp32 rows (partials_y) and arrives on the
//   counter of each (token, 32-column chunk); the arrival that completes a
//   chunk sums the valid slots in slot order (DirectY::finish_from): Y is the
//   same bits on every run.
// y_acc's head (onelaunch_head_words, moe_args.hpp) holds the ticket, the row
// blocks' counters and the chunks' counters; the layer program clears it
// before the launch. The moe2 unit runs the whole layer with
// kFlagOneLaunchLayer, stage 2 alone without it (reading the intermediate it
// is given); the moe1 unit runs stage 1 alone. All three take tickets.
namespace ft {

// Stage 2 of a one-launch layer: twice stage 1's columns per tile (the same
// rows staged), per-slot fp32 rows finished into Y, no split-K.
template <class Cfg>
struct OneLaunchStage2Cfg : Cfg {
  static constexpr int tile_n = 2 * Cfg::tile_n;
  static constexpr Reduce reduce = Reduce::partials_y;
  static constexpr int split_k = 1;
};

// Where the head's counters are: [0] the ticket, [1, 1 + row blocks) the row
// blocks' stage-1 arrivals, then one per (token, chunk); the rows after it all.
template <int TileM>
struct OneLaunchHead {
  FT_DEVICE static int row_blocks(const MoeArgs& p) { return p.max_padded_rows / TileM; }
  FT_DEVICE static int* ticket(const MoeArgs& p) { return reinterpret_cast<int*>(p.y_acc); }
  FT_DEVICE static int* done(const MoeArgs& p) { return ticket(p) + 1; }
  FT_DEVICE static int* chunks(const MoeArgs& p) { return done(p) + row_blocks(p); }
  FT_DEVICE static float* rows(const MoeArgs& p) { return p.y_acc + onelaunch_head_words(p.tokens, p.hidden, row_blocks(p)); }
};

// Stage 2's arrivals (the Y parameter of Stage2): DirectY's counts and
// finishing, on the head's chunk counters and rows.
template <class Cfg2>
struct OneLaunchY {
  using Head = OneLaunchHead<Cfg2::tile_m>;
  FT_DEVICE static float* sums(const MoeArgs& p) { return Head::rows(p); }
  FT_DEVICE static void arrive(const MoeArgs& p, int t, int c, int n) {
    int* counter = Head::chunks(p) + (long long)t * (p.hidden / kDirectYColumns) + c;
    if (atomic_add(counter, n) + n != DirectY<Cfg2>::expected(p, t)) return;
    fence_device();  // every other arrival's rows are visible from here on
    DirectY<Cfg2>::finish_from(p, Head::rows(p), t, c * kDirectYColumns);
  }
};

// When a stage-2 tile may start: every stage-1 column tile of its row block
// has arrived. A parameter so that a test can release it early
// (tests/emu/units/onelaunch.cpp).
struct StageOneComplete {
  FT_DEVICE static int needed(int column_tiles) { return column_tiles; }
};

template <class Cfg, int Role, class Release = StageOneComplete>
struct OneLaunch {
  using Cfg2 = OneLaunchStage2Cfg<Cfg>;
  using S1 = Stage1<Cfg>;
  using S2 = Stage2<Cfg2, OneLaunchY<Cfg2>>;
  using Head = OneLaunchHead<Cfg::tile_m>;
  static constexpr int kThreads = S1::kThreads;
  // The GEMMs' LDS (the route tables follow, sized per problem: onelaunch_route_bytes).
  static constexpr int kSmemBytes = (S1::kSmemBytes + 15) / 16 * 16;
  static_assert(Role == 1 || Role == 2, "the moe1 or the moe2 unit");
  static_assert(!fp8_stage<Cfg>() && !Cfg::Atom::kWarpgroup, "16-bit tiled atoms");
  static_assert(S2::kThreads == kThreads && S2::kSmemBytes == S1::kSmemBytes, "both GEMMs stage the same rows");
  static_assert(Cfg::split_k == 1 && Cfg::tiles_per_block == 1, "the ticket walk is the persistence");

  FT_DEVICE static void run(const MoeArgs& args) {
    MoeArgs p = args;
    route(p);
    const bool layer = Role == 2 && (p.flags & kFlagOneLaunchLayer) != 0;
    const long long R = *p.padded_rows / Cfg::tile_m;
    const long long J1 = p.inter_size / Cfg::tile_n, J2 = p.hidden / Cfg2::tile_n;
    const long long begin = Role == 1 || layer ? 0 : R * J1;
    const long long end = Role == 1 ? R * J1 : R * (J1 + J2);
    int* slot = tables(p).ticket;
    for (;;) {
      barrier();  // every thread has read the previous ticket
      if (thread_index() == 0) *slot = atomic_add(Head::ticket(p), 1);
      barrier();
      const long long item = begin + *slot;
      if (item >= end) return;
      if (item < R * J1) {
        typename S1::Gemm g;
        S1::tile(p, g, int(item / J1), int(item % J1));
        fence_device();  // this thread's intermediate values, before the arrival
        barrier();
        if (thread_index() == 0) atomic_add(Head::done(p) + item / J1, 1);
      } else {
        const int row_block = int((item - R * J1) / J2);
        if (layer) wait_for_stage1(p, row_block, int(J1));
        typename S2::Gemm g;
        S2::tile(p, g, row_block, int((item - R * J1) % J2), 0);
      }
    }
  }

  FT_DEVICE static void wait_for_stage1(const MoeArgs& p, int row_block, int column_tiles) {
    if (thread_index() == 0)
      while (load_acquire(Head::done(p) + row_block) < Release::needed(column_tiles)) spin_pause();
    barrier();
  }

  // The block's words after the GEMM's LDS (onelaunch_route_bytes): counts
  // [E], offsets [E + 1], the bad-id count, the ticket, padded_rows, sorted_ids
  // [rows], block_experts [rows / tile_m].
  struct Tables {
    int *counts, *offsets, *bad, *ticket, *padded;
    i32 *sorted, *experts;
  };
  FT_DEVICE static Tables tables(const MoeArgs& p) {
    Tables t;
    t.counts = reinterpret_cast<int*>(shared_memory() + kSmemBytes);
    t.offsets = t.counts + p.experts;
    t.bad = t.offsets + p.experts + 1;
    t.ticket = t.bad + 1;
    t.padded = t.ticket + 1;
    t.sorted = t.padded + 1;
    t.experts = t.sorted + p.max_padded_rows;
    return t;
  }

  // This block's align into the tables; p points at them.
  FT_DEVICE static void route(MoeArgs& p) {
    const int E = p.experts, B = Cfg::tile_m, tid = thread_index();
    const int pairs = p.tokens * p.topk;
    const Tables tb = tables(p);
    int *counts = tb.counts, *offsets = tb.offsets, *bad = tb.bad, *padded = tb.padded;
    i32 *sorted = tb.sorted, *experts = tb.experts;
    for (int e = tid; e < E; e += kThreads) counts[e] = 0;
    if (tid == 0) *bad = 0;
    barrier();
    count_pairs<kThreads>(p, 0, pairs, counts, bad);
    barrier();
    if (block_index_x() == 0) {
      zero_unrouted_rows(p, tid, p.tokens, kThreads);
      if (tid == 0 && p.bad_ids) *p.bad_ids = *bad;
    }
    padded_offsets<kThreads>(counts, offsets, counts, E, B);  // counts are not read after this
    const int total = offsets[E];
    if (tid == 0) *padded = total;
    for (int b = tid; b < total / B; b += kThreads) experts[b] = expert_of_row(offsets, E, b * B);
    for (int r = tid; r < total; r += kThreads) sorted[r] = pairs;
    barrier();
    // Each pair's place in its expert's run: the pairs of that expert before
    // it (the same tables in every block; no LDS cursor races).
    for (int i = tid; i < pairs; i += kThreads) {
      const int e = p.topk_ids[i];
      if (e < 0 || e >= E) continue;
      int rank = 0;
      for (int j = 0; j < i; ++j) rank += p.topk_ids[j] == e ? 1 : 0;
      sorted[offsets[e] + rank] = i;
    }
    barrier();
    p.sorted_ids = sorted;
    p.block_experts = experts;
    p.padded_rows = padded;
    p.align_block = B;
  }
};

}  // namespace ft
