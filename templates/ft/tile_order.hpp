#pragma once
// Which (row block, column tile) a block of a stage kernel computes. The grid
// is (max_padded_rows / tile_m, N / tile_n[, split_k]), launched x fastest.
//
// Group == 1: block (x, y) computes row block x, column tile y.
// Group > 1: the grid is walked in bands of Group column tiles, row blocks
// outer and the band's column tiles inner, so the blocks resident at once
// cover a few experts' rows and a few weight tiles: both stay in L2 until all
// their users have read them, instead of X being re-read from HBM for every
// column tile. Needs grid_x, grid_y as launched (the Hopper family derives
// them from MoeArgs::max_padded_rows, which every launcher sets to
// grid_x * tile_m).
namespace ft {

template <int Group>
FT_DEVICE void tile_of_block(int grid_x, int grid_y, int& row_block, int& col_tile) {
  if constexpr (Group <= 1) {
    row_block = block_index_x();
    col_tile = block_index_y();
  } else {
    const long long linear = block_index_x() + (long long)block_index_y() * grid_x;
    const long long band = (long long)grid_x * Group;  // blocks per full band
    const int first = int(linear / band) * Group;
    const int width = grid_y - first < Group ? grid_y - first : Group;  // the last band may be narrower
    const int within = int(linear % band);
    row_block = within / width;
    col_tile = first + within % width;
  }
}

}  // namespace ft
