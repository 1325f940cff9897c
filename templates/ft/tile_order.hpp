#pragma once
// Which (row block, column tile[, split]) a block of a stage kernel computes.
// The logical grid is (max_padded_rows / tile_m, N / tile_n[, split_k]).
//
// Group == 1: tile (x, y) is row block x, column tile y.
// Group > 1: the grid is walked in bands of Group column tiles, row blocks
// outer and the band's column tiles inner, so the blocks resident at once
// cover a few experts' rows and a few weight tiles: both stay in L2 until all
// their users have read them, instead of X being re-read from HBM for every
// column tile. Needs the logical grid's size (the Hopper family derives it
// from MoeArgs::max_padded_rows, which every launcher sets to the row blocks
// times tile_m).
namespace ft {

// The band walk on linear tile index `linear` of a grid_x x grid_y grid.
template <int Group>
FT_DEVICE void tile_of_index(int grid_x, int grid_y, long long linear, int& row_block, int& col_tile) {
  const long long band = (long long)grid_x * Group;  // tiles per full band
  const int first = int(linear / band) * Group;
  const int width = grid_y - first < Group ? grid_y - first : Group;  // the last band may be narrower
  const int within = int(linear % band);
  row_block = within / width;
  col_tile = first + within % width;
}

template <int Group>
FT_DEVICE void tile_of_block(int grid_x, int grid_y, int& row_block, int& col_tile) {
  if constexpr (Group <= 1) {
    row_block = block_index_x();
    col_tile = block_index_y();
  } else {
    tile_of_index<Group>(grid_x, grid_y, block_index_x() + (long long)block_index_y() * grid_x, row_block, col_tile);
  }
}

// Calls f(row_block, col_tile, split) for this block's tiles: the one its
// grid position names, or, when Cfg::tiles_per_block > 1 (a persistent grid
// of ceil(tiles / tiles_per_block) blocks, layer/program.cpp), tiles
// block, block + blocks, ... in the band walk, splits outermost: the blocks
// resident at any moment still work on neighbouring tiles.
template <class Cfg, int Group, class F>
FT_DEVICE void for_each_tile(int grid_x, int grid_y, int splits, F f) {
  if constexpr (Cfg::tiles_per_block <= 1) {
    int row_block, col_tile;
    tile_of_block<Group>(grid_x, grid_y, row_block, col_tile);
    f(row_block, col_tile, block_index_z());
  } else {
    const long long per_split = (long long)grid_x * grid_y, tiles = per_split * splits;
    const long long blocks = (tiles + Cfg::tiles_per_block - 1) / Cfg::tiles_per_block;
    for (long long t = block_index_x(); t < tiles; t += blocks) {
      int row_block, col_tile;
      tile_of_index<Group>(grid_x, grid_y, t % per_split, row_block, col_tile);
      f(row_block, col_tile, int(t / per_split));
    }
  }
}

// A dynamic walk's inputs: the launch's ticket counter (MoeArgs::tile_tickets,
// zeroed before the stage) and the row blocks the align step filled.
struct TileTickets {
  i32* counter = nullptr;
  int row_blocks = 0;
};

// One ticket from the counter: the index of the next tile no block has taken.
// A struct so a test can replace it for one Config (tests/emu: a walk that
// skips tiles fails).
template <class Cfg>
struct TicketTake {
  FT_DEVICE static int take(i32* counter) { return atomic_add(counter, 1); }
};

// The dynamic walk (Cfg::dynamic_tiles: persistent producer blocks): the
// launch's blocks take tiles from one counter, in the band walk's order,
// until none is left -- so the blocks resident first do the work and the
// grid's partial last wave finds nothing (no SM idles while another still
// has tiles to go), and only the row blocks in use count (a static walk
// strides over the capacity's). One producer lane takes each ticket and
// hands it to every lane of the block through a ring of Gemm::kTicketSlots
// shared slots, each with a "full" (its one arrival) and an "empty" (the
// block's threads, once read) mbarrier; the producer runs at most that many
// tiles ahead of the slowest reader. A ticket past the last tile ends every
// lane's walk.
template <class Cfg, int Group, class Gemm, class F>
FT_DEVICE void for_each_ticket(Gemm& g, TileTickets tickets, int grid_y, int splits, F f);
#if defined(FT_FLAVOUR_CUDA) || defined(FT_FLAVOUR_EMU)  // mbarriers: the Hopper machinery's flavours
template <class Cfg, int Group, class Gemm, class F>
FT_DEVICE void for_each_ticket(Gemm& g, TileTickets tickets, int grid_y, int splits, F f) {
  constexpr int S = Gemm::kTicketSlots;
  const long long per_split = (long long)tickets.row_blocks * grid_y, tiles = per_split * splits;
  const bool writer = Gemm::loader_index() == 0;
  u64* full = g.ticket_full();
  u64* empty = full + S;
  volatile i32* slot = g.ticket_slots();
  for (int j = 0;; ++j) {
    const int s = j % S;
    if (writer) {
      if (j >= S) mbarrier_wait(&empty[s], (j / S - 1) & 1);  // every lane has read ticket j - S
      slot[s] = TicketTake<Cfg>::take(tickets.counter);
      mbarrier_arrive(&full[s]);
    }
    mbarrier_wait(&full[s], (j / S) & 1);
    const long long t = slot[s];
    mbarrier_arrive(&empty[s]);
    if (t < 0 || t >= tiles) return;  // spent (a counter left uncleared may even have wrapped)
    int row_block, col_tile;
    tile_of_index<Group>(tickets.row_blocks, grid_y, t % per_split, row_block, col_tile);
    f(row_block, col_tile, int(t / per_split));
  }
}
#endif

// A stage's tickets: its counter (0: stage 1, 1: stage 2) and the row blocks
// of tile_m rows the align step filled; none for a static walk.
template <class Cfg>
FT_DEVICE TileTickets tickets_of(i32* tile_tickets, int which, const i32* padded_rows) {
  if constexpr (dynamic_tiles_of<Cfg>()) return TileTickets{tile_tickets + which, *padded_rows / Cfg::tile_m};
  else return TileTickets{};
}

// Runs a stage's `tile(row_block, col_tile, split, lanes)` over this block's
// tiles with one Gemm, whose pipeline state lives across a persistent
// block's tiles. A persistent block with a producer warpgroup splits its
// lanes here, once: the producer makes its own pass over the tiles and
// leaves, the consumers make theirs, each through a copy of the tile code
// compiled for its role (lanes.hpp), so neither role's code reaches the
// other's (register allocation; a one-tile block's producer leaves inside
// WgmmaGemm::run_specialized instead, and its lanes run one copy).
// `tickets`: a dynamic walk's (tickets_of), ignored by a static one.
template <class Cfg, class Gemm, class F>
FT_DEVICE void run_tiles(Gemm& g, int grid_x, int grid_y, int splits, F tile, TileTickets tickets = {}) {
  g.start();
  if constexpr (Cfg::tiles_per_block > 1 && Gemm::kProducerWarpgroup) {
    auto walk = [&](auto lanes) {
      auto one = [&](int rb, int ct, int s) { tile(rb, ct, s, lanes); };
      if constexpr (dynamic_tiles_of<Cfg>()) for_each_ticket<Cfg, Gemm::kTileGroup>(g, tickets, grid_y, splits, one);
      else for_each_tile<Cfg, Gemm::kTileGroup>(grid_x, grid_y, splits, one);
    };
    if (!Gemm::holds_results()) {
      Gemm::producer_registers();  // a rebalanced block's producer gives registers back...
      walk(ProducerLanes{});
      Gemm::leave();
      return;
    }
    Gemm::consumer_registers();  // ... and its consumers take them
    walk(ConsumerLanes{});
  } else {
    static_assert(!dynamic_tiles_of<Cfg>(), "a dynamic walk is a persistent producer block's");
    for_each_tile<Cfg, Gemm::kTileGroup>(grid_x, grid_y, splits, [&](int rb, int ct, int s) { tile(rb, ct, s, AllLanes{}); });
  }
}

}  // namespace ft
