#pragma once
// Launch geometry of the MoE layer's kernels for a problem and token count:
// the formulas the tuner, the export manifest and the runtime share.
#include <string>

#include "generator/problem.hpp"
#include "generator/variant.hpp"

namespace ft {

struct LaunchShape {
  int grid_x = 1, grid_y = 1, grid_z = 1;
  int block = 1;
  int lds_bytes = 0;  // dynamic LDS / shared memory
};

inline constexpr int kAlignThreads = 256;   // ft::kAlignThreads in templates/ft/moe_align.hpp
inline constexpr int kReduceThreads = 256;  // ft::kReduceThreads in templates/ft/moe_reduce.hpp

// Capacity of sorted_ids: every pair, plus at most align_block - 1 padding rows
// for each expert that has tokens, rounded to whole blocks. Needs no routing
// information, so the host never waits for the device.
long long max_padded_rows(const Problem& p, int tokens, int align_block);

LaunchShape align_launch(const Problem& p);
LaunchShape stage_launch(const Variant& v, const Problem& p, int tokens, int align_block);
LaunchShape reduce_launch(const Problem& p, int tokens);
LaunchShape shuffle_launch(long long rows, long long cols);
inline constexpr int kReferenceThreads = 256;  // ft::kReferenceThreads in templates/ft/reference.hpp
LaunchShape reference_launch(KernelKind stage, const Problem& p, int tokens);

// The same formulas as text, for the export manifest (T = tokens).
std::string stage_grid_formula(const Variant& v);
std::string max_padded_rows_formula();

}  // namespace ft
