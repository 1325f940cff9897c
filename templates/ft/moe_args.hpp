#pragma once
// The by-value argument structs of the MoE layer's kernels and the block sizes
// of the support kernels. Plain data, compiled by the device flavours and by
// the host alike (layer/device_structs.hpp includes this file): the host fills
// these very structs, and the export manifest documents their byte layout so
// any host (C++, JAX FFI, PyTorch) can launch exported kernels. Append-only;
// never reorder.
namespace ft {

inline constexpr int kAlignThreads = 256;      // moe_align: one block
inline constexpr int kReduceThreads = 256;     // moe_reduce and shuffle_weights
inline constexpr int kReferenceThreads = 256;  // reference_stage1/2
inline constexpr int kFillThreads = 256;       // fill_random
inline constexpr int kQuantiseThreads = 256;   // moe_quantise_x / moe_quantise_inter: one block per row

// How an fp8 layer scales its values (a value is its e4m3 code times its scale);
// none for the 16-bit types. The scale tensors (fp32, row-major):
//   per_tensor: X one static scale the caller gives ([1]); W1 and W2 one per expert ([E]).
//   per_token:  X one dynamic scale per token ([T]); W1 one per output channel ([E, 2I],
//               gate rows then up rows); W2 one per output channel ([E, H]).
//   block128:   X dynamic 1 x 128 groups ([T, H/128]); W1 128 x 128 blocks
//               ([E, 2I/128, H/128]); W2 likewise ([E, H/128, I/128]).
//   static_tensor: per_tensor's X and weights, and the intermediate with one static
//               scale the caller gives too ([1], inter_scale), as FP8 checkpoints
//               ship them: stage 1 quantises on store with it (no quantise_inter).
// The intermediate (stage 1 -> stage 2) is e4m3 with dynamic 1 x 128 group scales
// ([T*k, I/128]) in the other modes (or one per row, InterScales::row); with
// static_tensor every slot of that layout holds the static scale. Dynamic scales
// are amax / (the format's max). The host's Problem::scales is this enum
// (generator/problem.hpp; spelled "static" there).
enum class Scales { none, per_tensor, per_token, block128, static_tensor };
// The modes whose X and weight scales are per_tensor's (one static X scale, one per expert).
constexpr bool tensor_scales(Scales s) { return s == Scales::per_tensor || s == Scales::static_tensor; }
inline constexpr int kScaleGroup = 128;  // the k-extent of a block128 or intermediate scale group

struct MoeArgs {
  const u16* x;               // [T, H] activations
  const i32* topk_ids;        // [T, k] expert of each (token, slot)
  const float* topk_weights;  // [T, k] routed weight of each (token, slot)
  const u16* w1;              // [E, 2I, H] gate rows then up rows (plain, pre-shuffled or tiled)
  const u16* w2;              // [E, H, I]
  u16* inter;                 // [T*k, I] stage-1 output, row = token*k + slot
  float* y_acc;               // atomic: [T, H] fp32 sums; partials: [T*k, H] fp32; partials16: [T*k, H] in the element type
  u16* y;                     // [T, H] output
  i32* sorted_ids;            // [max_padded_rows] pair ids grouped by expert; pad = T*k
  i32* block_experts;         // [max_padded_rows / align_block] expert of each row block
  i32* padded_rows;           // [1] rows used in sorted_ids (a multiple of align_block)
  i32 tokens;                 // T
  i32 hidden;                 // H
  i32 inter_size;             // I
  i32 experts;                // E
  i32 topk;                   // k
  i32 align_block;            // rows per expert block in sorted_ids (>= the stages' tile_m)
  i32 max_padded_rows;        // capacity of sorted_ids
  i32 flags;                  // bits 0 (kFlagWeightInStage1), 1 (kFlagUnquantised): read by the reference kernels only;
                              // the layer kernels fix the routed-weight placement at compile time; bits 2, 3: align's clear
  i32* bad_ids;               // [1] or null: align writes how many topk_ids lie outside [-1, experts)
                              // (-1 is "no expert here": the slot contributes nothing)
  // fp8 layers (Scales above), appended; null / zero in 16-bit layers. w1 and w2
  // then hold e4m3 codes, x stays bf16 (quantise_x makes xq of it), y is bf16.
  const float* x_scale;       // per_tensor: [1] the caller's static activation scale
  const float* w1_scales;     // the caller's W1 scales (shape by Scales)
  const float* w2_scales;     // the caller's W2 scales
  u8* xq;                     // [T, H] e4m3 activations: quantise_x writes, stage 1 reads
  float* x_scales;            // per_tensor [1] (a copy of x_scale), per_token [T], block128 [T, H/128]
  u8* inter_q;                // [T*k, I] e4m3 intermediate: stage 2 reads
  float* inter_scales;        // [T*k, I/128] its group scales
  i32 scales;                 // the Scales value: read by the support kernels (the stages compile it in)
  i32 reserved;               // zero
  // appended: static_tensor: [1] the caller's static intermediate scale (h quantised as
  // h / inter_scale, saturating); null in the other modes.
  const float* inter_scale;
  // appended: [2] the tile tickets of stage 1 and stage 2 when they schedule their
  // persistent blocks dynamically (Cfg::dynamic_tiles, tile_order.hpp); a
  // clear_tile_tickets step zeroes them before the stages; null otherwise.
  i32* tile_tickets;
};

// Dynamic LDS of the align kernel: per-expert counts, offsets (E + 1) and
// cursors, and the bad-id counter. Host-side only (the launch rule).
constexpr int align_lds_bytes(int experts) { return (3 * experts + 2) * 4; }

// The wide align (moe_align_count + moe_align_scatter, for many pairs): each
// block takes align_chunk(pairs) consecutive pairs -- 4096, or more where that
// would need over 256 blocks -- and the count table, [blocks, experts + 1]
// int32 (the last column: ids outside [-1, experts)), sits in sorted_ids
// after its max_padded_rows entries. The kernels and the layer program both
// compute these, so the grid and the table cannot disagree.
constexpr int align_chunk(int pairs) {
  return pairs <= 256 * 4096 ? 4096 : (pairs + 255) / 256;
}
constexpr int align_blocks(int pairs) { return pairs <= 0 ? 1 : (pairs + align_chunk(pairs) - 1) / align_chunk(pairs); }
constexpr long long align_table_words(int pairs, int experts) { return (long long)align_blocks(pairs) * (experts + 1); }
// Their dynamic LDS: the counts (E + 1); offsets (E + 1), starts, cursors and totals (E + 1).
constexpr int align_count_lds_bytes(int experts) { return (experts + 1) * 4; }
constexpr int align_scatter_lds_bytes(int experts) { return (4 * experts + 2) * 4; }

// Dynamic LDS of the quantise kernels (moe_quantise.hpp): one float per thread.
constexpr int quantise_lds_bytes() { return kQuantiseThreads * 4; }

// Where the scale of a value lives (fp8 layers; the layouts of ft::Scales above).
// Weight element (expert e, row n, column k) of an [E, N, K] weight (W1: N = 2I,
// K = H; W2: N = H, K = I):
constexpr long long weight_scale_index(Scales s, long long e, long long n, long long k, long long N, long long K) {
  switch (s) {
    case Scales::per_tensor:
    case Scales::static_tensor: return e;
    case Scales::per_token: return e * N + n;
    case Scales::block128: return (e * (N / kScaleGroup) + n / kScaleGroup) * (K / kScaleGroup) + k / kScaleGroup;
    case Scales::none: break;
  }
  return 0;
}
constexpr long long weight_scale_count(Scales s, long long E, long long N, long long K) {
  switch (s) {
    case Scales::per_tensor:
    case Scales::static_tensor: return E;
    case Scales::per_token: return E * N;
    case Scales::block128: return E * (N / kScaleGroup) * (K / kScaleGroup);
    case Scales::none: break;
  }
  return 0;
}
// X's scales, [T, H]: per_tensor and static_tensor [1] (the caller's static scale; x_scales holds a copy),
// per_token [T], block128 [T, H/128]; scale of element (t, h):
constexpr long long activation_scale_index(Scales s, long long t, long long h, long long H) {
  return s == Scales::per_token ? t : s == Scales::block128 ? t * (H / kScaleGroup) + h / kScaleGroup : 0;
}
constexpr long long activation_scale_count(Scales s, long long T, long long H) {
  return s == Scales::per_token ? T : s == Scales::block128 ? T * (H / kScaleGroup) : tensor_scales(s) ? 1 : 0;
}

// The weight pre-arrangement kernel's argument.
struct ShuffleArgs {
  const u16* src;  // [rows, cols] row-major
  u16* dst;        // the same elements in the `layout` order (weight_layout.hpp)
  i32 rows;        // all experts' rows together (E * N), a multiple of 16
  i32 cols;        // K, a multiple of 8 (of 64 for tiled)
  i32 layout;      // the destination layout: 1 shuffled, 2 tiled (WeightLayout); 0 is read as shuffled
  i32 reserved;    // zero
};

// The seeded random fill (random_fill.hpp) that makes verification inputs.
struct FillArgs {
  u16* dst;
  u64 count;
  u64 seed;
  float scale;
  i32 elem;  // 0 bf16, 1 f16, 2 e4m3 codes (the target's flavour; dst holds bytes), 3 fp32 (dst holds floats)
  // appended: elements i and j share a magnitude (random_magnitude) when i / group == j / group;
  // 0: no magnitudes (every 16-bit fill before fp8 existed). fp32 fills are scale x magnitude.
  i32 group;
  i32 reserved;
};

inline constexpr i32 kFlagWeightInStage1 = 1;
// Bits 2 and 3, read by the one-block align only (set on its step by the layer
// program for small _y layers, layer/program.cpp): align zeroes y_acc's first
// direct_y_words(T, H) words (2: the arrival counters) and the T*H fp32 sums
// after them (3: atomic_y), so the layer has no clear step to launch.
inline constexpr i32 kFlagAlignClearsCounters = 4;
inline constexpr i32 kFlagAlignClearsSums = 8;
// Bit 1, fp8 reference kernels only: the bf16 layer on the dequantised weights
// (X unquantised; stage 2 reads the fp32 intermediate in y_acc rounded to
// bf16, not inter_q): the sanity reference of an fp8 layer.
inline constexpr i32 kFlagUnquantised = 2;
// Bit 4, read by the one-launch family's moe2 unit (moe_onelaunch.hpp): the
// launch is the whole layer (stage 1, stage 2 and Y); without it stage 2 alone,
// reading the intermediate it is given.
inline constexpr i32 kFlagOneLaunchLayer = 16;

// How stage 2 hands its sums to the reduce kernel: fp32 atomics into [T, H];
// per-slot fp32 partials [T*k, H]; or per-slot partials in the layer's 16-bit
// element type (half the bytes, no atomics: the top-k sum is fp32 in reduce).
// The _y modes have no reduce kernel: stage 2 writes Y itself (decode, where
// the reduce launch costs as much as its work). Every stage-2 thread that
// stored sums for token t in a 32-column chunk then adds how many values it
// stored to that chunk's arrival counter; the thread whose addition completes
// the chunk (every valid slot of t, every split) converts it to Y. atomic_y:
// the fp32 atomics of `atomic` (any order, split-K allowed); partials_y: the
// fp32 per-slot rows of `partials`, summed by the finishing thread in slot
// order (deterministic: the same Y bit for bit on every run). The counters sit
// at the head of y_acc (direct_y_words), the sums or rows after them; align
// writes the Y rows of tokens with no valid slot (zeros), which no chunk
// finishes.
enum class Reduce { atomic, partials, partials16, atomic_y, partials_y };
// Whether stage 2 writes Y (no reduce step), and how it keeps its sums.
constexpr bool writes_y(Reduce r) { return r == Reduce::atomic_y || r == Reduce::partials_y; }
constexpr Reduce sums_of(Reduce r) {
  return r == Reduce::atomic_y ? Reduce::atomic : r == Reduce::partials_y ? Reduce::partials : r;
}
inline constexpr int kDirectYColumns = 32;  // the columns of one arrival counter (every stage-2 tile_n is a multiple)
// The arrival counters of a _y mode at the head of y_acc: one int per token and
// 32-column chunk, rounded to 64 words so the sums after them stay 256-byte aligned.
constexpr long long direct_y_words(long long tokens, long long hidden) {
  return (tokens * (hidden / kDirectYColumns) + 63) / 64 * 64;
}
// The one-launch layer's head of y_acc (moe_onelaunch.hpp): the work ticket,
// one arrival counter per row block (its stage-1 column tiles done), one per
// token and 32-column chunk of Y; rounded to 64 words, the per-slot fp32 rows
// [T*k, H] after it. The layer program clears the head before the launch.
constexpr long long onelaunch_head_words(long long tokens, long long hidden, long long row_blocks) {
  return (1 + row_blocks + tokens * (hidden / kDirectYColumns) + 63) / 64 * 64;
}
// The LDS of its own align, after the GEMM's: per-expert counts and offsets
// (E + 1), the bad-id count, the ticket, padded_rows, then sorted_ids [rows]
// and block_experts [rows / tile_m].
constexpr long long onelaunch_route_bytes(long long rows, int tile_m, int experts) {
  return (2LL * experts + 4 + rows + rows / tile_m) * 4;
}
// How a stage reads its weights (weight_layout.hpp): plain, shuffled and tiled
// are arrangements in memory; mapped reads the plain weights through a tensor
// map (sm_90a's producer warpgroup, moe_mapped_args.hpp): no arranged copy.
enum class WeightLayout { plain, shuffled, tiled, mapped };
// How an fp8 layer's stage 1 hands its intermediate to stage 2: as bf16, which
// the quantise_inter step turns into e4m3 with group scales, or quantised in its
// own epilogue (quantise-on-store: e4m3 codes and group scales written directly).
enum class InterStore { bf16, fp8 };

}  // namespace ft
