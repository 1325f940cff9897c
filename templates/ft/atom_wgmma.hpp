#pragma once
// NVIDIA Hopper warpgroup atoms (rows of atoms_wgmma.def): one
// wgmma.mma_async.m64nNk<K> whose A (64 x K) and B (N x K) are read from
// shared memory through 64-bit descriptors, accumulating into N/2 fp32
// registers per lane of the 128-lane warpgroup. Operand tiles are K-major with
// 128-byte rows in the 128-byte swizzled layout (wgmma_gemm.hpp writes them):
// the 16-byte chunk c of row r sits at chunk c ^ (r % 8), and groups of 8 rows
// are 1024 bytes apart. One instruction reads 32 bytes of each row: k16 of a
// 16-bit type (a row holds 64 elements) or k32 of e4m3 (a row holds 128), so
// descriptors, swizzle and the 32-byte step per instruction are the same for
// both; e4m3 takes no transpose immediates (K-major only, PTX ISA).
//
// Accumulator register i of lane l of warp w (of the warpgroup) holds
//   row 16 w + l / 4 + 8 ((i / 2) % 2),  column 8 (i / 4) + 2 (l % 4) + i % 2
// (PTX ISA, "Matrix fragments for wgmma.m64nNk16": the m16n8 layout of
// mma.sync repeated along N, one 16-row slice per warp; the same for k32 e4m3).
#include "ft/atom_layouts.hpp"
#include "ft/shape_rules.hpp"
#include "ft/tensor_map.hpp"

namespace ft {

// The descriptor of a K-major, 128-byte-swizzled operand slice starting at
// shared-memory byte address `addr` (1024-aligned tile plus a k offset of
// 32 bytes per k16 step): leading byte offset 16 (unused by this layout),
// stride byte offset 1024 (8 rows of 128 bytes), layout type 1 (128B swizzle).
FT_HOST_DEVICE constexpr u64 wgmma_descriptor(u32 addr) {
  return u64((addr & 0x3FFFF) >> 4) | (u64(16 >> 4) << 16) | (u64(1024 >> 4) << 32) | (u64(1) << 62);
}

// The descriptor of an MN-major, 128-byte-swizzled 16-bit operand slice (the
// transposed forms of wgmma, for operands whose rows in global memory run
// along M or N: the backward's K-grouped GEMM): rows of 128 bytes hold 64
// consecutive M (or N) values of one k, eight k rows make a 1024-byte group,
// `lbo` bytes lead from one 64-wide M/N block to the next and `sbo` bytes
// from one 8-deep k group to the next (PTX ISA, "Shared Memory Matrix
// Layout", MN-major with 128-byte swizzle), layout type 1.
FT_HOST_DEVICE constexpr u64 wgmma_descriptor_mn(u32 addr, u32 lbo, u32 sbo) {
  return u64((addr & 0x3FFFF) >> 4) | (u64((lbo >> 4) & 0x3FFF) << 16) | (u64((sbo >> 4) & 0x3FFF) << 32) | (u64(1) << 62);
}
FT_HOST_DEVICE constexpr u32 wgmma_descriptor_lbo(u64 desc) { return u32((desc >> 16) & 0x3FFF) << 4; }
FT_HOST_DEVICE constexpr u32 wgmma_descriptor_sbo(u64 desc) { return u32((desc >> 32) & 0x3FFF) << 4; }

// The shared-memory byte address a descriptor starts at.
FT_HOST_DEVICE constexpr u32 wgmma_descriptor_address(u64 desc) { return u32(desc & 0x3FFF) << 4; }

// The accumulator layout above: row and column of register i of thread t of
// the warpgroup (t = thread index % 128).
FT_HOST_DEVICE constexpr int wgmma_acc_row(int t, int i) { return 16 * (t / 32) + (t % 32) / 4 + 8 * ((i / 2) % 2); }
FT_HOST_DEVICE constexpr int wgmma_acc_col(int t, int i) { return 8 * (i / 4) + 2 * (t % 4) + i % 2; }

// The 128-byte swizzle and the K-major and MN-major operand layouts the
// descriptors above describe (swizzle128, swizzle128_offset,
// swizzle128_mn_offset) live in tensor_map.hpp, beside the TMA unit's
// swizzles they are a case of, where the host reads them too.

}  // namespace ft

#if defined(FT_FLAVOUR_CUDA)
// Every accumulator register is named in the instruction, so the operand
// lists are spelled out: "+f" lists by macro, the "{%0, ...}" text below.
#define FT_WGMMA_F4(d, i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define FT_WGMMA_F16(d, i) FT_WGMMA_F4(d, i), FT_WGMMA_F4(d, i + 4), FT_WGMMA_F4(d, i + 8), FT_WGMMA_F4(d, i + 12)
#define FT_WGMMA_F32(d, i) FT_WGMMA_F16(d, i), FT_WGMMA_F16(d, i + 16)
#define FT_WGMMA_F64(d, i) FT_WGMMA_F32(d, i), FT_WGMMA_F32(d, i + 32)
#define FT_WGMMA_F128(d, i) FT_WGMMA_F64(d, i), FT_WGMMA_F64(d, i + 64)
#define FT_WGMMA_D16 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}"
#define FT_WGMMA_D32 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define FT_WGMMA_D64 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define FT_WGMMA_D128 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}"
// d += A x B^T (scale-d predicate true; the kernels zero d first). The
// immediates after it: scale-a and scale-b 1, and for 16-bit types transpose-a
// and transpose-b 0 (K-major); e4m3 has no transpose immediates.
#define FT_WGMMA_IMM_bf16 ", 1, 1, 0, 0"
#define FT_WGMMA_IMM_f16 ", 1, 1, 0, 0"
#define FT_WGMMA_IMM_e4m3 ", 1, 1"
#define FT_WGMMA_ASM(N, R, next, K, elem, ptx_types)                                                       \
  "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k" #K "." ptx_types " " \
  FT_WGMMA_D##R ", %" #R ", %" #next ", p" FT_WGMMA_IMM_##elem ";\n}\n"

// The 16-bit forms with the transpose immediates TA, TB (literal 0 or 1):
// 1 reads that operand MN-major (wgmma_descriptor_mn).
#define FT_WGMMA_ASM_T(N, R, next, K, ptx_types, TA, TB)                                                  \
  "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\nwgmma.mma_async.sync.aligned.m64n" #N "k" #K "." ptx_types " " \
  FT_WGMMA_D##R ", %" #R ", %" #next ", p, 1, 1, " #TA ", " #TB ";\n}\n"
#define FT_WGMMA_ISSUE_T(N, K, d, a, b, ptx_types, TA, TB)                                                   \
  if constexpr (N == 64)                                                                                     \
    asm volatile(FT_WGMMA_ASM_T(64, 32, 33, K, ptx_types, TA, TB) : FT_WGMMA_F32(d, 0) : "l"(a), "l"(b));     \
  else if constexpr (N == 128)                                                                               \
    asm volatile(FT_WGMMA_ASM_T(128, 64, 65, K, ptx_types, TA, TB) : FT_WGMMA_F64(d, 0) : "l"(a), "l"(b));    \
  else                                                                                                       \
    asm volatile(FT_WGMMA_ASM_T(256, 128, 129, K, ptx_types, TA, TB) : FT_WGMMA_F128(d, 0) : "l"(a), "l"(b))
#define FT_WGMMA_ISSUE_MN(N, K, d, a, b, elem, ptx_types, TA, TB)     \
  if constexpr (TA && TB) {                                           \
    FT_WGMMA_ISSUE_T(N, K, d, a, b, ptx_types, 1, 1);                 \
  } else if constexpr (TA) {                                          \
    FT_WGMMA_ISSUE_T(N, K, d, a, b, ptx_types, 1, 0);                 \
  } else if constexpr (TB) {                                          \
    FT_WGMMA_ISSUE_T(N, K, d, a, b, ptx_types, 0, 1);                 \
  } else {                                                            \
    FT_WGMMA_ISSUE(N, K, d, a, b, elem, ptx_types);                   \
  }

#define FT_WGMMA_ISSUE(N, K, d, a, b, elem, ptx_types)                                                \
  if constexpr (N == 32)                                                                              \
    asm volatile(FT_WGMMA_ASM(32, 16, 17, K, elem, ptx_types) : FT_WGMMA_F16(d, 0) : "l"(a), "l"(b));   \
  else if constexpr (N == 64)                                                                         \
    asm volatile(FT_WGMMA_ASM(64, 32, 33, K, elem, ptx_types) : FT_WGMMA_F32(d, 0) : "l"(a), "l"(b));   \
  else if constexpr (N == 128)                                                                        \
    asm volatile(FT_WGMMA_ASM(128, 64, 65, K, elem, ptx_types) : FT_WGMMA_F64(d, 0) : "l"(a), "l"(b));  \
  else                                                                                                \
    asm volatile(FT_WGMMA_ASM(256, 128, 129, K, elem, ptx_types) : FT_WGMMA_F128(d, 0) : "l"(a), "l"(b))

namespace ft {
// Orders this warpgroup's register and shared-memory accesses before the
// wgmma that follow (required before the first wgmma of a batch).
FT_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
FT_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Waits until at most N committed wgmma groups of this warpgroup are pending.
template <int N>
FT_DEVICE void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous wgmma (it cannot see that they touch these registers).
template <int R>
FT_DEVICE void wgmma_fence_operands(float (&d)[R]) {
  FT_UNROLL for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
}  // namespace ft

#elif defined(FT_FLAVOUR_EMU)
// Emulation: each lane computes its own accumulator slots straight from the
// emulated shared memory, decoding the descriptors and the swizzle exactly as
// the layout above says, so a template that writes tiles in another layout
// gets wrong answers here too. Issue order is execution order, so the
// fences and waits have nothing to do.
#define FT_WGMMA_ISSUE(N, K, d, a, b, elem, ptx_types) emu::emulate_wgmma<Elem::elem, K, N>(d, a, b)
#define FT_WGMMA_ISSUE_MN(N, K, d, a, b, elem, ptx_types, TA, TB) emu::emulate_wgmma<Elem::elem, K, N, TA, TB>(d, a, b)

namespace ft {
namespace emu {
// TA / TB: that operand is MN-major (16-bit types only), its element (mn, k)
// at swizzle(start + (mn / 64) lbo + (k / 8) sbo + (k % 8) 128 + (mn % 64) 2)
// with lbo and sbo read from its descriptor.
template <Elem E, int K, int N, bool TA = false, bool TB = false>
void emulate_wgmma(float (&d)[N / 2], u64 a_desc, u64 b_desc) {
  static_assert(K * elem_bytes(E) == 32, "one wgmma reads 32 bytes of each 128-byte row");
  static_assert(!(TA || TB) || elem_bytes(E) == 2, "transposed operands: 16-bit types only (PTX ISA)");
  const unsigned char* lds = shared_memory();
  // A slice start = 1024-aligned tile + k offset; the swizzle acts on the
  // address bits, so element (r, k) lives at swizzle(start + r*128 + k*bytes),
  // decoded as the row's element type (OCP e4m3 for the fp8 row).
  auto element = [&](u64 desc, bool mn_major, int r, int k) {
    const u32 start = wgmma_descriptor_address(desc);
    const u32 at = mn_major ? start + u32(r / 64) * wgmma_descriptor_lbo(desc) + u32(k / 8) * wgmma_descriptor_sbo(desc) +
                                  u32(k % 8) * 128 + u32(r % 64) * elem_bytes(E)
                            : start + u32(r) * 128 + u32(k) * elem_bytes(E);
    storage_t<E> v;
    __builtin_memcpy(&v, lds + swizzle128(at), sizeof v);
    return to_f32<E>(v);
  };
  const int t = thread_index() % 128;
  for (int i = 0; i < N / 2; ++i) {
    const int row = wgmma_acc_row(t, i), col = wgmma_acc_col(t, i);
    float acc = d[i];
    for (int k = 0; k < K; ++k) acc += element(a_desc, TA, row, k) * element(b_desc, TB, col, k);
    d[i] = acc;
  }
}
}  // namespace emu
FT_DEVICE void wgmma_fence() {}
FT_DEVICE void wgmma_commit() {}
template <int N>
FT_DEVICE void wgmma_wait() {}
template <int R>
FT_DEVICE void wgmma_fence_operands(float (&)[R]) {}
}  // namespace ft
#endif

#if defined(FT_WGMMA_ISSUE)
// One atom type per row; the flavour above supplies how an instruction issues.
#define FT_WGMMA(id, M, NSTEP, K, elem, ptx_types, targets, sass)                                          \
  struct id {                                                                                             \
    static constexpr int M_ = M, K_ = K;                                                                  \
    static constexpr Elem element = Elem::elem;                                                           \
    using storage = storage_t<Elem::elem>;                                                                \
    static constexpr bool kWarpgroup = true;                                                              \
    static_assert(K * elem_bytes(Elem::elem) == 32, "one wgmma reads 32 bytes of each 128-byte row");    \
    template <int N>                                                                                      \
    FT_DEVICE static void mma(float (&d)[N / 2], u64 a, u64 b) {                                          \
      static_assert(wgmma_n_supported(N), "wgmma atoms here: N = 32, 64, 128 or 256");                     \
      static_assert(N > 0 && operands_fit_target<Elem::elem>(), FT_FP8_FLAVOUR_MISMATCH);                 \
      FT_WGMMA_ISSUE(N, K, d, a, b, elem, ptx_types);                                                     \
    }                                                                                                     \
    /* The same with operand A (TA) and / or B (TB) MN-major (wgmma_descriptor_mn); 16-bit rows only. */ \
    template <int N, bool TA, bool TB>                                                                    \
    FT_DEVICE static void mma_mn(float (&d)[N / 2], u64 a, u64 b) {                                       \
      static_assert(N == 64 || N == 128 || N == 256, "MN-major operands here: N = 64, 128 or 256");        \
      static_assert(N > 0 && elem_bytes(Elem::elem) == 2, "transposed operands: 16-bit types only (PTX ISA)"); \
      if constexpr (elem_bytes(Elem::elem) == 2) {                                                        \
        FT_WGMMA_ISSUE_MN(N, K, d, a, b, elem, ptx_types, TA, TB);                                        \
      }                                                                                                   \
    }                                                                                                     \
  };
namespace ft::atom {
#include "ft/atoms_wgmma.def"
}  // namespace ft::atom
#undef FT_WGMMA
#endif
