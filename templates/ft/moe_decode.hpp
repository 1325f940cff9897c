#pragma once
// The one-launch decode layer: the whole MoE layer (routing, stage 1, stage 2
// and the weighted top-k sum) in one persistent kernel, for small token
// counts (T <= kDecodeMaxTokens), where the two-stage layer's align / clear /
// reduce launches and its few-block stages cost more than the weights take to
// stream (docs/HOPPER.md, "The one-launch decode layer").
//
// - Routing in every block: each block sorts the T*k (token, slot) pairs by
//   (expert, pair) in LDS (a pair's place is the count of pairs before it, so
//   no scan and no serial loop), and numbers the touched experts ("slots") in
//   expert order. An id of -1 is "no expert here"; any other id outside
//   [0, experts) is left out and counted (block 0 writes *bad_ids).
// - Work units, handed out by a ticket counter in global memory
//   (sorted_ids[0]: this form sorts nothing there, decode_shape.hpp): tickets [0, slots * I / cols) are stage-1 units (slot
//   major: `cols` intermediate columns of one expert, all its rows),
//   the next H / cols are stage-2 units (`cols` output columns of Y over every
//   touched expert). Tickets are taken in order by running blocks, so a block
//   waiting in stage 2 waits only for units that running blocks hold, and
//   those never wait: no grid-wide barrier, no co-residency assumption, any
//   grid size is correct.
// - A stage-1 unit ends with an arrival on its expert's counter
//   (sorted_ids[1 + slot]); a stage-2 unit takes the experts in slot order
//   and waits for each one's I / cols arrivals only when it reaches it, so
//   stage 2 starts on the first experts while stage 1 still runs on the last.
// - Stage 2 sums each token's experts in LDS in slot order and writes Y
//   itself: no fp32 atomics, no clear, no reduce launch; the order is fixed
//   by the routing, so the result is deterministic.
// - Every thread streams weights: a unit's columns are split over the block's
//   threads along K (kDecodeThreads / cols threads per column, consecutive
//   16-byte chunks on consecutive lanes), partial sums are added in LDS.
// The math is fp32 FMAs on CUDA / vector cores: at T <= 64 a unit has a few
// rows per expert, so the weight stream, not the multiply, sets the time.
#include "ft/decode_shape.hpp"

namespace ft {

// How a stage-2 unit waits for an expert's intermediate: every one of its
// `units` stage-1 units has arrived (tests/emu/units/ replaces it by a
// release that comes early, which verification must catch).
struct DecodeRelease {
  FT_DEVICE static void wait(const int* arrivals, int units) { wait_at_least(arrivals, units); }
};

template <Elem El, int Cols, class Release = DecodeRelease>
struct DecodeLayer {
  static constexpr int kThreads = kDecodeThreads, R = kDecodeRows;
  static constexpr int S = kThreads / Cols;  // threads per column
  static constexpr int kBatch = 4;           // 16-byte chunks of each weight row in flight per thread
  static_assert(kThreads % Cols == 0 && Cols * R <= kThreads, "decode: cols must divide the block and leave a thread per (column, row)");
  static_assert(El == Elem::bf16 || El == Elem::f16, "decode: 16-bit layers only");

  // The block's LDS (decode_lds_bytes, decode_shape.hpp).
  struct Routing {
    int* expert;       // [pairs] expert of each pair, -1 when it has none
    int* sorted;       // [pairs] pair ids ordered by (expert, pair); the first `valid` are used
    int* first;        // [pairs] 1 where a pair is the first of its expert
    int* slot_expert;  // [slots] expert of each touched slot, in expert order
    int* slot_start;   // [slots + 1] first sorted position of each slot
    int* scalars;      // [4] the ticket, touched slots, valid pairs, bad ids
    float* partial;    // [kThreads * 2R] per-thread partial sums
    float* sums;       // [tokens * Cols] stage 2's sums of one column chunk
  };

  FT_DEVICE static Routing carve(const MoeArgs& p) {
    const int pairs = p.tokens * p.topk, slots = decode_slots(pairs, p.experts);
    int* w = reinterpret_cast<int*>(shared_memory());
    Routing r;
    r.expert = w;
    r.sorted = w + pairs;
    r.first = w + 2 * pairs;
    r.slot_expert = w + 3 * pairs;
    r.slot_start = r.slot_expert + slots;
    r.scalars = r.slot_start + slots + 1;
    r.partial = reinterpret_cast<float*>(r.scalars + 4);
    r.sums = r.partial + kThreads * 2 * R;
    return r;
  }

  FT_DEVICE static void route(const MoeArgs& p, const Routing& r) {
    const int pairs = p.tokens * p.topk, E = p.experts, tid = thread_index();
    if (tid < 4) r.scalars[tid] = 0;
    for (int i = tid; i < pairs; i += kThreads) {
      const int e = p.topk_ids[i];
      r.expert[i] = e >= 0 && e < E ? e : -1;
    }
    barrier();
    for (int i = tid; i < pairs; i += kThreads) {
      const int e = r.expert[i];
      r.first[i] = 0;
      if (e < 0) {
        if (p.topk_ids[i] != -1) atomic_add(&r.scalars[3], 1);
        continue;
      }
      int pos = 0, before = 0;
      for (int j = 0; j < pairs; ++j) {
        const int f = r.expert[j];
        pos += f >= 0 && (f < e || (f == e && j < i));
        before += f == e && j < i;
      }
      r.sorted[pos] = i;
      r.first[i] = before == 0;
      atomic_add(&r.scalars[2], 1);
    }
    barrier();
    for (int i = tid; i < pairs; i += kThreads) {
      if (!r.first[i]) continue;
      const int e = r.expert[i];
      int slot = 0, pos = 0;
      for (int j = 0; j < pairs; ++j) {
        const int f = r.expert[j];
        slot += r.first[j] && f < e;
        pos += f >= 0 && f < e;
      }
      r.slot_expert[slot] = e;
      r.slot_start[slot] = pos;
      atomic_add(&r.scalars[1], 1);
    }
    barrier();
    if (tid == 0) r.slot_start[r.scalars[1]] = r.scalars[2];
    barrier();
  }

  FT_DEVICE static Chunk16 load(const u16* p) { return *reinterpret_cast<const Chunk16*>(p); }
  FT_DEVICE static void unpack(const Chunk16& c, float (&v)[8]) {
    u32 w[4];
    FT_MEMCPY(w, &c, 16);
    FT_UNROLL
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = to_f32<El>(u16(w[i] & 0xffffu));
      v[2 * i + 1] = to_f32<El>(u16(w[i] >> 16));
    }
  }

  // Stage 1, `Cols` columns of slot `slot`'s expert from column chunk * Cols:
  // inter[pair, col] = silu(x . gate_col) * (x . up_col) for each of its pairs.
  FT_DEVICE static void stage1(const MoeArgs& p, const Routing& r, int slot, int chunk) {
    const int tid = thread_index(), j = tid / S, s = tid % S;
    const long long H = p.hidden, I = p.inter_size;
    const int e = r.slot_expert[slot], first = r.slot_start[slot], n = r.slot_start[slot + 1] - first;
    const int col = chunk * Cols + j, chunks = int(H / 8);
    const u16* gate = p.w1 + ((long long)e * 2 * I + col) * H;
    const u16* up = gate + I * H;
    for (int r0 = 0; r0 < n; r0 += R) {
      const int rows = n - r0 < R ? n - r0 : R;
      const u16* x[R];
      FT_UNROLL
      for (int q = 0; q < R; ++q) x[q] = p.x + (long long)(r.sorted[first + r0 + (q < rows ? q : rows - 1)] / p.topk) * H;
      float g[R] = {}, u[R] = {};
      for (int c0 = s; c0 < chunks; c0 += kBatch * S) {
        Chunk16 wg[kBatch], wu[kBatch];
        FT_UNROLL
        for (int b = 0; b < kBatch; ++b) {
          const int c = c0 + b * S;
          wg[b] = c < chunks ? load(gate + 8 * c) : zero_chunk();
          wu[b] = c < chunks ? load(up + 8 * c) : zero_chunk();
        }
        FT_UNROLL
        for (int b = 0; b < kBatch; ++b) {
          const int c = c0 + b * S;
          if (c >= chunks) break;
          float fg[8], fu[8];
          unpack(wg[b], fg);
          unpack(wu[b], fu);
          FT_UNROLL
          for (int q = 0; q < R; ++q) {
            if (q >= rows) break;
            float fx[8];
            unpack(load(x[q] + 8 * c), fx);
            FT_UNROLL
            for (int i = 0; i < 8; ++i) {
              g[q] += fx[i] * fg[i];
              u[q] += fx[i] * fu[i];
            }
          }
        }
      }
      FT_UNROLL
      for (int q = 0; q < R; ++q) {
        r.partial[tid * 2 * R + q] = g[q];
        r.partial[tid * 2 * R + R + q] = u[q];
      }
      barrier();
      if (tid < Cols * R) {
        const int jj = tid / R, q = tid % R;
        float gate_sum = 0.0f, up_sum = 0.0f;
        for (int t = 0; t < S; ++t) {
          gate_sum += r.partial[(jj * S + t) * 2 * R + q];
          up_sum += r.partial[(jj * S + t) * 2 * R + R + q];
        }
        if (q < rows) {
          const int pair = r.sorted[first + r0 + q];
          const float v = silu(gate_sum, exp_f32(-gate_sum)) * up_sum;
          p.inter[(long long)pair * I + chunk * Cols + jj] = from_f32<El>(v);
        }
      }
      barrier();
    }
  }

  // Stage 2, output columns unit * Cols.. of Y for every token: each touched
  // expert in slot order (waiting for its stage-1 units), each of its pairs'
  // routed weight x (inter[pair] . W2[e, h]) summed per token in LDS.
  FT_DEVICE static void stage2(const MoeArgs& p, const Routing& r, int unit) {
    const int tid = thread_index(), j = tid / S, s = tid % S;
    const long long H = p.hidden, I = p.inter_size;
    const int h = unit * Cols + j, chunks = int(I / 8), touched = r.scalars[1];
    for (int i = tid; i < p.tokens * Cols; i += kThreads) r.sums[i] = 0.0f;
    for (int slot = 0; slot < touched; ++slot) {
      if (tid == 0) Release::wait(p.sorted_ids + 1 + slot, int(I / Cols));
      barrier();
      const int e = r.slot_expert[slot], first = r.slot_start[slot], n = r.slot_start[slot + 1] - first;
      const u16* w = p.w2 + ((long long)e * H + h) * I;
      for (int r0 = 0; r0 < n; r0 += R) {
        const int rows = n - r0 < R ? n - r0 : R;
        const u16* a[R];
        FT_UNROLL
        for (int q = 0; q < R; ++q) a[q] = p.inter + (long long)r.sorted[first + r0 + (q < rows ? q : rows - 1)] * I;
        float acc[R] = {};
        for (int c0 = s; c0 < chunks; c0 += kBatch * S) {
          Chunk16 wc[kBatch];
          FT_UNROLL
          for (int b = 0; b < kBatch; ++b) {
            const int c = c0 + b * S;
            wc[b] = c < chunks ? load(w + 8 * c) : zero_chunk();
          }
          FT_UNROLL
          for (int b = 0; b < kBatch; ++b) {
            const int c = c0 + b * S;
            if (c >= chunks) break;
            float fw[8];
            unpack(wc[b], fw);
            FT_UNROLL
            for (int q = 0; q < R; ++q) {
              if (q >= rows) break;
              float fa[8];
              unpack(load_l2(a[q] + 8 * c), fa);  // written by other blocks in this launch: from L2
              FT_UNROLL
              for (int i = 0; i < 8; ++i) acc[q] += fa[i] * fw[i];
            }
          }
        }
        FT_UNROLL
        for (int q = 0; q < R; ++q) r.partial[tid * 2 * R + q] = acc[q];
        barrier();
        if (tid < Cols) {
          for (int q = 0; q < rows; ++q) {
            float sum = 0.0f;
            for (int t = 0; t < S; ++t) sum += r.partial[(tid * S + t) * 2 * R + q];
            const int pair = r.sorted[first + r0 + q];
            r.sums[(pair / p.topk) * Cols + tid] += p.topk_weights[pair] * sum;
          }
        }
        barrier();
      }
    }
    barrier();
    for (int i = tid; i < p.tokens * Cols; i += kThreads)
      p.y[(long long)(i / Cols) * H + unit * Cols + i % Cols] = from_f32<El>(r.sums[i]);
    barrier();
  }

  FT_DEVICE static void run(const MoeArgs& p) {
    // Blocks beyond what runs at once (two per SM: 256 threads of ~120
    // registers) would start only after the tickets ran out: they leave at once.
    if (block_index_x() >= kDecodeBlocksPerSm * sm_count_bound()) return;
    const Routing r = carve(p);
    route(p, r);
    const int tid = thread_index();
    if (block_index_x() == 0 && tid == 0 && p.bad_ids) *p.bad_ids = r.scalars[3];
    const int per_expert = p.inter_size / Cols;
    const int units1 = r.scalars[1] * per_expert, units = units1 + p.hidden / Cols;
    for (;;) {
      if (tid == 0) r.scalars[0] = atomic_add(p.sorted_ids, 1);
      barrier();
      const int ticket = r.scalars[0];
      barrier();
      if (ticket >= units) break;
      if (ticket >= units1) {
        stage2(p, r, ticket - units1);
        continue;
      }
      const int slot = ticket / per_expert;
      stage1(p, r, slot, ticket % per_expert);
      fence_device();  // this block's intermediate before its arrival
      barrier();
      if (tid == 0) atomic_add(p.sorted_ids + 1 + slot, 1);
    }
  }
};

}  // namespace ft
