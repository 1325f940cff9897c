#pragma once
// The argument struct of the backward's K-grouped GEMM (moe_kgrouped.hpp):
// plain data the host fills and the kernel reads, like moe_args.hpp's
// (the host includes it after int_types.hpp). Append-only; never reorder.
namespace ft {

// C_e = A_e^T B_e for every expert e, A_e and B_e the rows of the pairs
// routed to e, through the forward align's sorted ids (docs/TRAINING.md).
struct KGroupedArgs {
  const u16* a;               // rows of m values: [T, m] when a_per_token (a token's row: dY), else [T*k, m] (dH)
  const u16* b;               // rows of n values: [T, n] when b_per_token (X), else [T*k, n] (the intermediate)
  const float* a_scales;      // [T*k] or null: pair p's row of A is multiplied by a_scales[p] (the routed weight)
  float* c;                   // [E, m, n] fp32, every element written
  const i32* sorted_ids;      // [max_padded_rows] the forward's align: pair ids grouped by expert; pad = pairs
  const i32* block_experts;   // [padded_rows / align_block] expert of each row block (nondecreasing)
  const i32* padded_rows;     // [1] rows used in sorted_ids
  i32 pairs;                  // T * k
  i32 topk;                   // k
  i32 m;                      // columns of A = rows of each C_e
  i32 n;                      // columns of B = columns of each C_e
  i32 experts;                // E
  i32 align_block;            // rows per row block of sorted_ids
  i32 a_per_token;            // 1: pair p reads A row p / k; 0: row p
  i32 b_per_token;            // 1: pair p reads B row p / k; 0: row p
};

}  // namespace ft
