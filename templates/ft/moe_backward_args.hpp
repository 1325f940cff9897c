#pragma once
// The argument struct of the backward's K-grouped GEMM (moe_kgrouped.hpp):
// plain data the host fills and the kernel reads, like moe_args.hpp's
// (the host includes it after int_types.hpp). Append-only; never reorder.
namespace ft {

// C_e = A_e^T B_e for every expert e, A_e and B_e the rows of the pairs
// routed to e, through the forward align's sorted ids (docs/TRAINING.md).
// The output is C in fp32 (c), or, when c16 is non-null, C in the layer's
// 16-bit element type (c16, each value rounded as from_f32<elem>, c unread):
// the weight gradient in the weights' type, with no fp32 copy and no cast.
// Either way every element of [E, m, n] is written (zeros for an expert
// without rows). c16 is 16-byte aligned, like c.
struct KGroupedArgs {
  const u16* a;               // rows of m values: [T, m] when a_per_token (a token's row: dY), else [T*k, m] (dH)
  const u16* b;               // rows of n values: [T, n] when b_per_token (X), else [T*k, n] (the intermediate)
  const float* a_scales;      // [T*k] or null: pair p's row of A is multiplied by a_scales[p] (the routed weight)
  float* c;                   // [E, m, n] fp32, every element written; unused when c16 is non-null
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
  u16* c16;                   // [E, m, n] in the 16-bit element type, or null: write c (appended)
};

}  // namespace ft

namespace ft {

// What a routed dgrad GEMM (moe_dgrad.hpp) does with its product C [T*k rows, n].
enum class DgradEpilogue {
  swiglu,   // stage-2 backward: dh = w_p C, the SwiGLU backward into d_gate_up, C . h_p into d_weights
  scatter,  // stage-1 backward: C added into dx[p / k] (the top-k scatter-add, fp32 atomics)
};

// C[p, :] = A[row(p), :] W_e for the pairs p of each row block of the
// forward's sorted ids (expert e), W_e [K, n] row-major, read transposed.
struct DgradArgs {
  const u16* a;               // rows of K values: [T, K] when a_per_token (dY), else [T*k, K] (dH)
  const u16* w;               // [E, K, n]: W2 [E, H, I] (K = H, n = I) or W1 [E, 2I, H] (K = 2I, n = H)
  const float* row_scales;    // swiglu: [T*k] the routed weights (null: 1)
  const u16* gate_up;         // swiglu: [T*k, 2n] the forward's saved gate and up pre-activations
  u16* d_gate_up;             // swiglu: [T*k, 2n] [dgate; dup], written for every routed pair
  float* d_weights;           // swiglu: [T*k] fp32, added into (the caller zeroes it)
  float* dx;                  // scatter: [T, n] fp32, added into (the caller zeroes it)
  const i32* sorted_ids;      // the forward align's: pair ids grouped by expert; pad = pairs
  const i32* block_experts;   // [padded_rows / align_block]
  const i32* padded_rows;     // [1]
  i32 pairs;                  // T * k
  i32 topk;                   // k
  i32 k;                      // K: the reduction
  i32 n;                      // n: the output columns
  i32 experts;                // E
  i32 align_block;            // rows per row block of sorted_ids, a multiple of tile_m
  i32 a_per_token;            // 1: pair p reads A row p / k; 0: row p
  i32 reserved;               // zero
};

}  // namespace ft

namespace ft {

// What the backward reads of the forward, recomputed (moe_saved.hpp,
// forward_saved): the support unit's kernel for callers whose forward did not
// keep them.
struct SavedArgs {
  const u16* x;          // [T, H]
  const i32* topk_ids;   // [T, k]
  const u16* w1;         // [E, 2I, H] plain
  u16* gate_up;          // [T*k, 2I] out: [gate; up] pre-activations of each pair
  u16* inter;            // [T*k, I] out: silu(gate) * up, unweighted
  i32 tokens;            // T
  i32 hidden;            // H
  i32 inter_size;        // I
  i32 experts;           // E
  i32 topk;              // k
  i32 reserved;          // zero
};

}  // namespace ft
