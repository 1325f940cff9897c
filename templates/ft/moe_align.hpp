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
  barrier();
  for (int i = tid; i < pairs; i += kAlignThreads) {
    const int e = p.topk_ids[i];
    if (e >= 0 && e < E) atomic_add(&counts[e], 1);
    else if (e != -1) atomic_add(bad, 1);
  }
  barrier();
  if (tid == 0 && p.bad_ids) *p.bad_ids = *bad;
  if (tid == 0) {
    int off = 0;
    for (int e = 0; e < E; ++e) {
      offsets[e] = off;
      off += (counts[e] + B - 1) / B * B;
    }
    offsets[E] = off;
    *p.padded_rows = off;
  }
  barrier();
  const int total = offsets[E];
  for (int b = tid; b < total / B; b += kAlignThreads) {
    // The expert whose run holds row b*B: the last e with offsets[e] <= b*B and a non-empty run.
    int lo = 0, hi = E - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (offsets[mid] <= b * B) lo = mid;
      else hi = mid - 1;
    }
    p.block_experts[b] = lo;
  }
  for (int r = tid; r < total; r += kAlignThreads) p.sorted_ids[r] = pairs;
  barrier();
  for (int i = tid; i < pairs; i += kAlignThreads) {
    const int e = p.topk_ids[i];
    if (e >= 0 && e < E) p.sorted_ids[offsets[e] + atomic_add(&cursor[e], 1)] = i;
  }
}

}  // namespace ft
