#pragma once
// NVIDIA mma.sync atoms (rows of atoms_mma_sync.def): inline PTX on CUDA, the
// documented fragment layout under emulation.
#include "ft/atom_layouts.hpp"

#if defined(FT_FLAVOUR_CUDA)
#define FT_MMA_SYNC(id, M, N, K, elem, ptx_types, targets, sass)                                          \
  struct id : MmaSyncM16N8K16Layout<Elem::elem> {                                                       \
    template <class Self = id>                                                                          \
    FT_DEVICE static void mma(float (&c)[4], const u16 (&a)[8], const u16 (&b)[4]) {                   \
      u32 ar[4], br[2];                                                                                 \
      FT_MEMCPY(ar, a, sizeof ar);                                                               \
      FT_MEMCPY(br, b, sizeof br);                                                               \
      asm volatile("mma.sync.aligned.m16n8k16.row.col." ptx_types                                       \
                   " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                           \
                   : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                                     \
                   : "r"(ar[0]), "r"(ar[1]), "r"(ar[2]), "r"(ar[3]), "r"(br[0]), "r"(br[1]));           \
    }                                                                                                   \
  };
#elif defined(FT_FLAVOUR_EMU)
#include "ft/atom_emulate.hpp"
#define FT_MMA_SYNC(id, M, N, K, elem, ptx_types, targets, sass)                                          \
  struct id : MmaSyncM16N8K16Layout<Elem::elem> {                                                       \
    template <class Self = id>                                                                          \
    FT_DEVICE static void mma(float (&c)[4], const u16 (&a)[8], const u16 (&b)[4]) {                   \
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
