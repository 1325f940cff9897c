#include "generator/launch.hpp"

#include <algorithm>

#include <fmt/format.h>

namespace ft {

long long max_padded_rows(const Problem& p, int tokens, int align_block) {
  const long long pairs = (long long)tokens * p.topk;
  const long long rows = pairs + std::min<long long>(p.experts, pairs) * (align_block - 1);
  return (rows + align_block - 1) / align_block * align_block;
}

LaunchShape align_launch(const Problem& p) { return {1, 1, 1, kAlignThreads, (3 * p.experts + 1) * 4}; }

LaunchShape stage_launch(const Variant& v, const Problem& p, int tokens, int align_block) {
  LaunchShape s;
  s.grid_x = int(max_padded_rows(p, tokens, align_block) / v.tile_m);
  s.grid_y = (v.kind == KernelKind::moe1 ? p.inter : p.hidden) / v.tile_n;
  s.grid_z = v.kind == KernelKind::moe2 ? v.split_k : 1;
  if (v.tiles_per_block > 1) {  // persistent: each block walks tiles block, block + grid_x, ... (ft::for_each_tile)
    const long long tiles = (long long)s.grid_x * s.grid_y * s.grid_z;
    s.grid_x = int((tiles + v.tiles_per_block - 1) / v.tiles_per_block);
    s.grid_y = s.grid_z = 1;
  }
  s.block = v.threads();
  s.lds_bytes = v.lds_bytes();
  return s;
}

LaunchShape reduce_launch(const Problem& p, int tokens) {
  const long long chunks = (long long)tokens * p.hidden / 8;
  return {int((chunks + kReduceThreads - 1) / kReduceThreads), 1, 1, kReduceThreads, 0};
}

LaunchShape shuffle_launch(long long rows, long long cols) {
  const long long chunks = rows * cols / 8;
  return {int((chunks + kReduceThreads - 1) / kReduceThreads), 1, 1, kReduceThreads, 0};
}

LaunchShape reference_launch(KernelKind stage, const Problem& p, int tokens) {
  if (stage == KernelKind::moe1)
    return {(p.inter + kReferenceThreads - 1) / kReferenceThreads, tokens * p.topk, 1, kReferenceThreads, 0};
  return {(p.hidden + kReferenceThreads - 1) / kReferenceThreads, tokens, 1, kReferenceThreads, 0};
}

std::string max_padded_rows_formula() {
  return "ceil((T*topk + min(experts, T*topk) * (align_block - 1)) / align_block) * align_block";
}

std::string stage_grid_formula(const Variant& v) {
  if (v.tiles_per_block > 1)
    return fmt::format("[ceil(max_padded_rows / {} * {} / {} * {} / {}), 1, 1]", v.tile_m,
                       v.kind == KernelKind::moe1 ? "inter" : "hidden", v.tile_n, v.kind == KernelKind::moe2 ? v.split_k : 1,
                       v.tiles_per_block);
  return fmt::format("[max_padded_rows / {}, {} / {}, {}]", v.tile_m, v.kind == KernelKind::moe1 ? "inter" : "hidden",
                     v.tile_n, v.kind == KernelKind::moe2 ? v.split_k : 1);
}

}  // namespace ft
