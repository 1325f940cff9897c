#pragma once
// NVIDIA mma.sync atoms (rows of atoms_mma_sync.def): inline PTX on CUDA, the
// documented fragment layout under emulation. The row's K picks the layout:
// m16n8k16 for 16-bit operands, m16n8k32 for e4m3 (atom_layouts.hpp). Both
// pass A in four .b32 registers and B in two, so one asm serves every row.
#include "ft/atom_layouts.hpp"

#if defined(FT_FLAVOUR_CUDA)
#define FT_MMA_SYNC(id, M, N, K, elem, ptx_types, targets, sass)                                          \
  struct id : MmaSyncLayoutFor<Elem::elem, K>::type {                                                   \
    static_assert(M == 16 && N == 8, "mma.sync atoms here are m16n8");                                  \
    template <class Self = id>                                                                          \
    FT_DEVICE static void mma(float (&c)[4], const storage (&a)[id::a_regs], const storage (&b)[id::b_regs]) { \
      static_assert(atom_fits_target<Self>(), FT_FP8_FLAVOUR_MISMATCH);                              \
      static_assert(sizeof a == 16 && sizeof b == 8, "mma.sync m16n8: A in 4, B in 2 .b32 registers");  \
      u32 ar[4], br[2];                                                                                 \
      FT_MEMCPY(ar, a, sizeof ar);                                                                      \
      FT_MEMCPY(br, b, sizeof br);                                                                      \
      asm volatile("mma.sync.aligned.m16n8k" #K ".row.col." ptx_types                                   \
                   " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                           \
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                     \
                   : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));           \
    }                                                                                                   \
  };
#elif defined(FT_FLAVOUR_EMU)
#include "ft/atom_emulate.hpp"
#define FT_MMA_SYNC(id, M, N, K, elem, ptx_types, targets, sass)                                          \
  struct id : MmaSyncLayoutFor<Elem::elem, K>::type {                                                   \
    static_assert(M == 16 && N == 8, "mma.sync atoms here are m16n8");                                  \
    template <class Self = id>                                                                          \
    FT_DEVICE static void mma(float (&c)[4], const storage (&a)[id::a_regs], const storage (&b)[id::b_regs]) { \
      static_assert(atom_fits_target<Self>(), FT_FP8_FLAVOUR_MISMATCH);                              \
      emu::emulate_mma<Self>(c, a, b);                                                                  \
    }                                                                                                   \
  };
#endif

#if defined(FT_MMA_SYNC)
namespace ft::atom {
#include "ft/atoms_mma_sync.def"
}  // namespace ft::atom
#undef FT_MMA_SYNC
#endif
