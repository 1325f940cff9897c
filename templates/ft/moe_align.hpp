#pragma once
// align/sort: groups the T*k (token, slot) pairs by expert, pads each expert's
// run to align_block rows with the sentinel T*k, and records the expert of every
// row block and the padded row count -- on the device, so the layer needs no
// host synchronisation and can be captured in a graph. One block; LDS holds
// per-expert counts, offsets and cursors and a counter of bad ids
// (align_lds_bytes, moe_args.hpp).
//
// A topk id of -1 means "no expert here" (serving engines mask the slots of
// other expert-parallel ranks this way): the pair is left out, so it
// contributes nothing. Any other id outside [0, experts) is left out too and
// counted into *bad_ids (when given): never read or written out of bounds.
namespace ft {

// offsets[0..E]: the exclusive prefix sums of each expert's run padded to B
// rows (offsets[E]: every padded row), from counts[0..E); every thread of the
// block calls it, and it ends with a barrier. A scan over the block (log2(E)
// rounds of Hillis-Steele, ping-ponging between offsets + 1 and scratch)
// instead of one thread walking E experts: at E = 128 or 256 that walk was a
// serial chain of E dependent LDS round trips and divisions by B. scratch
// (E ints) is overwritten; it may be counts itself.
// Threads: the block's (the one-launch layer aligns in blocks of its GEMM's size).
template <int Threads = kAlignThreads>
FT_DEVICE void padded_offsets(const int* counts, int* offsets, int* scratch, int E, int B) {
  const int tid = thread_index();
  for (int e = tid; e < E; e += Threads) scratch[e] = (counts[e] + B - 1) / B * B;
  barrier();
  int* src = scratch;
  int* dst = offsets + 1;
  for (int d = 1; d < E; d *= 2) {
    for (int e = tid; e < E; e += Threads) dst[e] = src[e] + (e >= d ? src[e - d] : 0);
    barrier();
    int* t = src;
    src = dst;
    dst = t;
  }
  if (src != offsets + 1)
    for (int e = tid; e < E; e += Threads) offsets[e + 1] = src[e];
  if (tid == 0) offsets[0] = 0;
  barrier();
}

// Counts the experts of pairs [first, last) into counts[0..E) (LDS) and the
// ids outside [-1, E) into *bad, Threads threads at a time.
template <int Threads = kAlignThreads>
FT_DEVICE void count_pairs(const MoeArgs& p, int first, int last, int* counts, int* bad) {
  for (int i = first + thread_index(); i < last; i += Threads) {
    const int e = p.topk_ids[i];
    if (e >= 0 && e < p.experts) atomic_add(&counts[e], 1);
    else if (e != -1) atomic_add(bad, 1);
  }
}

// The expert whose padded run holds `row`: the last e with offsets[e] <= row
// (offsets as padded_offsets leaves them; that run is not empty).
FT_DEVICE int expert_of_row(const int* offsets, int E, int row) {
  int lo = 0, hi = E - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

// Y's rows of the tokens t = first, first + stride, ... (< end) none of whose
// slots names an expert (all -1 or bad ids): zeros. The _y modes of stage 2
// finish only the chunks that received values (moe_args.hpp, Reduce), so
// align writes these rows; the reduce kernel of the other modes writes the
// same zeros again. Nothing without a Y (a stage-1 program alone).
FT_DEVICE void zero_unrouted_rows(const MoeArgs& p, int first, int end, int stride) {
  if (!p.y) return;
  for (int t = first; t < end; t += stride) {
    bool routed = false;
    for (int s = 0; s < p.topk; ++s) {
      const int e = p.topk_ids[(long long)t * p.topk + s];
      routed = routed || (e >= 0 && e < p.experts);
    }
    if (routed) continue;
    Chunk16* row = reinterpret_cast<Chunk16*>(p.y + (long long)t * p.hidden);
    for (int c = 0; c < p.hidden / 8; ++c) row[c] = zero_chunk();
  }
}

FT_DEVICE void moe_align(const MoeArgs& p) {
  const int E = p.experts, B = p.align_block, tid = thread_index();
  const int pairs = p.tokens * p.topk;
  int* counts = reinterpret_cast<int*>(shared_memory());
  int* offsets = counts + E;       // E + 1 entries
  int* cursor = offsets + E + 1;
  int* bad = cursor + E;
  for (int e = tid; e < E; e += kAlignThreads) {
    counts[e] = 0;
    cursor[e] = 0;
  }
  if (tid == 0) *bad = 0;
  if (p.flags & (kFlagAlignClearsCounters | kFlagAlignClearsSums)) {  // the layer's clear of y_acc (moe_args.hpp)
    const long long words = (p.flags & kFlagAlignClearsCounters ? direct_y_words(p.tokens, p.hidden) : 0) +
                            (p.flags & kFlagAlignClearsSums ? (long long)p.tokens * p.hidden : 0);
    Chunk16* acc = reinterpret_cast<Chunk16*>(p.y_acc);
    for (long long c = tid; c < words / 4; c += kAlignThreads) acc[c] = zero_chunk();
  }
  barrier();
  count_pairs(p, 0, pairs, counts, bad);
  barrier();
  zero_unrouted_rows(p, tid, p.tokens, kAlignThreads);
  if (tid == 0 && p.bad_ids) *p.bad_ids = *bad;
  padded_offsets(counts, offsets, counts, E, B);  // counts are not read after this
  if (tid == 0) *p.padded_rows = offsets[E];
  const int total = offsets[E];
  for (int b = tid; b < total / B; b += kAlignThreads) p.block_experts[b] = expert_of_row(offsets, E, b * B);
  for (int r = tid; r < total; r += kAlignThreads) p.sorted_ids[r] = pairs;
  barrier();
  for (int i = tid; i < pairs; i += kAlignThreads) {
    const int e = p.topk_ids[i];
    if (e >= 0 && e < E) p.sorted_ids[offsets[e] + atomic_add(&cursor[e], 1)] = i;
  }
}

}  // namespace ft

namespace ft {

// The wide align, for layers with many (token, slot) pairs: the one-block
// align above scans every pair twice with one block, hundreds of microseconds
// at T * k = 131072. Two launches of align_blocks(pairs) blocks instead
// (moe_args.hpp: align_chunk, the count table in sorted_ids' tail), with the
// same results as moe_align (the order of pairs within an expert's run may
// differ, as it does between two runs of moe_align).

// Launch 1: block b counts the experts of its chunk of pairs in LDS and writes
// them, with its count of ids outside [-1, experts), to row b of the table.
FT_DEVICE void moe_align_count(const MoeArgs& p) {
  const int E = p.experts, tid = thread_index(), b = block_index_x();
  const int pairs = p.tokens * p.topk, chunk = align_chunk(pairs);
  int* counts = reinterpret_cast<int*>(shared_memory());  // E + 1: the last counts bad ids
  for (int e = tid; e <= E; e += kAlignThreads) counts[e] = 0;
  barrier();
  const int first = b * chunk, last = first + chunk < pairs ? first + chunk : pairs;
  count_pairs(p, first, last, counts, &counts[E]);
  barrier();
  i32* table = p.sorted_ids + p.max_padded_rows;
  for (int e = tid; e <= E; e += kAlignThreads) table[(long long)b * (E + 1) + e] = counts[e];
}

// Launch 2: every block sums the table (each expert's total, its padded run's
// offset, and where this block's pairs of it start), scatters its chunk's
// pair ids, and fills its share of the padding rows and of block_experts;
// block 0 writes padded_rows and bad_ids.
FT_DEVICE void moe_align_scatter(const MoeArgs& p) {
  const int E = p.experts, B = p.align_block, tid = thread_index(), b = block_index_x();
  const int pairs = p.tokens * p.topk, chunk = align_chunk(pairs), blocks = align_blocks(pairs);
  const i32* table = p.sorted_ids + p.max_padded_rows;
  int* offsets = reinterpret_cast<int*>(shared_memory());  // E + 1
  int* start = offsets + E + 1;                              // this block's first row in each expert's run
  int* cursor = start + E;
  int* totals = cursor + E;                                  // E + 1: the last sums bad ids
  for (int e = tid; e <= E; e += kAlignThreads) {
    int total = 0, before = 0;
    for (int k = 0; k < blocks; ++k) {
      const int c = table[(long long)k * (E + 1) + e];
      if (k < b) before += c;
      total += c;
    }
    totals[e] = total;
    if (e < E) start[e] = before;
  }
  barrier();
  padded_offsets(totals, offsets, cursor, E, B);  // cursor is scratch here, zeroed again below
  for (int e = tid; e < E; e += kAlignThreads) cursor[e] = 0;
  if (tid == 0 && b == 0) {
    *p.padded_rows = offsets[E];
    if (p.bad_ids) *p.bad_ids = totals[E];
  }
  barrier();
  // Padding rows of the experts e = b, b + blocks, ...; block_experts of the
  // row blocks j = b, b + blocks, ... (the last e with offsets[e] <= j * B).
  for (int e = b; e < E; e += blocks)
    for (int r = offsets[e] + totals[e] + tid; r < offsets[e + 1]; r += kAlignThreads) p.sorted_ids[r] = pairs;
  for (int j = b * kAlignThreads + tid; j < offsets[E] / B; j += blocks * kAlignThreads)
    p.block_experts[j] = expert_of_row(offsets, E, j * B);
  const int first = b * chunk, last = first + chunk < pairs ? first + chunk : pairs;
  for (int i = first + tid; i < last; i += kAlignThreads) {
    const int e = p.topk_ids[i];
    if (e >= 0 && e < E) p.sorted_ids[offsets[e] + start[e] + atomic_add(&cursor[e], 1)] = i;
  }
  // The tokens whose first pair is in this block's chunk.
  const int k = p.topk;
  zero_unrouted_rows(p, (first + k - 1) / k + tid, (last + k - 1) / k, kAlignThreads);
}

}  // namespace ft
