#pragma once
// The one-launch decode layer's shape rules (moe_decode.hpp), freestanding:
// the kernel and the layer program (layer/program.cpp) compute them alike.
//
// Blocks of kDecodeThreads; each stage-1 work unit is `cols` intermediate
// columns of one touched expert, each stage-2 unit `cols` output columns over
// every touched expert; the rows of a unit are taken kDecodeRows pairs at a
// time. Up to kDecodeMaxTokens tokens (its in-kernel routing is quadratic in
// the pairs), at most kDecodeMaxBlocks blocks (a ticket counter hands out the
// units, so any grid is correct).
namespace ft {

inline constexpr int kDecodeThreads = 256;
inline constexpr int kDecodeRows = 4;
inline constexpr int kDecodeMaxTokens = 64;
inline constexpr int kDecodeMaxBlocks = 1024;
// Blocks of the grid that run at once on an SM (the kernel's 256 threads of
// about 120 registers: two fit in 65536); the kernel lets blocks beyond
// kDecodeBlocksPerSm x the device's SM count leave at once.
inline constexpr int kDecodeBlocksPerSm = 2;

// Experts a layer of `pairs` pairs can touch: the arrival counters' count.
constexpr int decode_slots(int pairs, int experts) { return pairs < experts ? pairs : experts; }
// The counters (in MoeArgs::sorted_ids, which this form does not sort into):
// the ticket counter, then one arrival counter per touched expert.
constexpr int decode_sync_words(int pairs, int experts) { return 1 + decode_slots(pairs, experts); }
// Dynamic LDS: per pair its expert, sorted position and first-of-expert flag;
// per slot its expert and first row (slots + 1); 4 scalars; the partial sums
// (kDecodeThreads x 2 kDecodeRows floats); stage 2's [T, cols] fp32 sums.
constexpr int decode_lds_bytes(int tokens, int topk, int experts, int cols) {
  const int pairs = tokens * topk, slots = decode_slots(pairs, experts);
  return (3 * pairs + 2 * slots + 1 + 4 + kDecodeThreads * 2 * kDecodeRows + tokens * cols) * 4;
}

}  // namespace ft
