#pragma once
// AMD MFMA atoms (rows of atoms_mfma.def). On HIP each calls its clang builtin;
// under emulation the same layout feeds atom_emulate.hpp. An atom whose
// instruction the compiler or target lacks fails to compile where it is used:
// never a silent no-op (an empty atom once produced all-zero outputs elsewhere).
#include "ft/atom_layouts.hpp"

#if defined(FT_FLAVOUR_HIP) || defined(FT_FLAVOUR_EMU)

#if defined(FT_FLAVOUR_HIP)
namespace ft::detail {

template <class T, int N>
using vec = T __attribute__((ext_vector_type(N)));

// The builtin's operand type holding one lane's `Bytes` bytes of an operand: a
// vector of T, or for the fp8 builtins (T = long) the 8 bytes as one scalar.
template <class T, int Bytes>
struct OperandOf {
  using type = vec<T, Bytes / int(sizeof(T))>;
};
template <int Bytes>
struct OperandOf<long, Bytes> {
  static_assert(Bytes == 8, "the fp8 MFMA builtins take 8 fp8 values per lane");
  using type = long;
};

template <class Atom>
struct MfmaUnavailable {
  static_assert(sizeof(Atom) == 0, "this MFMA instruction is not available for the target being compiled "
                                   "(the gfx950 shapes need LLVM >= 20 and --offload-arch=gfx950)");
  template <class... Args>
  FT_DEVICE static auto call(Args...) {}
};

}  // namespace ft::detail

#define FT_OPERAND_i16 short
#define FT_OPERAND_f16 _Float16
#define FT_OPERAND_i64 long
// __bf16 exists only where the gfx950 builtins do (older LLVM rejects the type
// outright); elsewhere those atoms fail at their use, never at parse time.
#if __has_builtin(__builtin_amdgcn_mfma_f32_16x16x32_bf16)
#define FT_OPERAND_bf16 __bf16
#else
#define FT_OPERAND_bf16 short
#endif

#if __has_builtin(__builtin_amdgcn_mfma_f32_16x16x16bf16_1k)
#define FT_MFMA_F32_16X16X16BF16_1K __builtin_amdgcn_mfma_f32_16x16x16bf16_1k
#define FT_MFMA_F32_32X32X8BF16_1K __builtin_amdgcn_mfma_f32_32x32x8bf16_1k
#define FT_MFMA_F32_16X16X16F16 __builtin_amdgcn_mfma_f32_16x16x16f16
#define FT_MFMA_F32_32X32X8F16 __builtin_amdgcn_mfma_f32_32x32x8f16
#else
#define FT_MFMA_F32_16X16X16BF16_1K ::ft::detail::MfmaUnavailable<Self>::call
#define FT_MFMA_F32_32X32X8BF16_1K ::ft::detail::MfmaUnavailable<Self>::call
#define FT_MFMA_F32_16X16X16F16 ::ft::detail::MfmaUnavailable<Self>::call
#define FT_MFMA_F32_32X32X8F16 ::ft::detail::MfmaUnavailable<Self>::call
#endif
#if __has_builtin(__builtin_amdgcn_mfma_f32_16x16x32_bf16)
#define FT_MFMA_F32_16X16X32_BF16 __builtin_amdgcn_mfma_f32_16x16x32_bf16
#define FT_MFMA_F32_32X32X16_BF16 __builtin_amdgcn_mfma_f32_32x32x16_bf16
#define FT_MFMA_F32_16X16X32_F16 __builtin_amdgcn_mfma_f32_16x16x32_f16
#define FT_MFMA_F32_32X32X16_F16 __builtin_amdgcn_mfma_f32_32x32x16_f16
#else
#define FT_MFMA_F32_16X16X32_BF16 ::ft::detail::MfmaUnavailable<Self>::call
#define FT_MFMA_F32_32X32X16_BF16 ::ft::detail::MfmaUnavailable<Self>::call
#define FT_MFMA_F32_16X16X32_F16 ::ft::detail::MfmaUnavailable<Self>::call
#define FT_MFMA_F32_32X32X16_F16 ::ft::detail::MfmaUnavailable<Self>::call
#endif

// The fp8 shapes: CDNA3 (gfx942, fnuz) and CDNA4 (gfx950, OCP) have them; clang
// knows them from LLVM 17 for gfx940+ (__has_builtin is false elsewhere, gfx90a).
#if __has_builtin(__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8)
#define FT_MFMA_F32_16X16X32_FP8_FP8 __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8
#define FT_MFMA_F32_32X32X16_FP8_FP8 __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8
#else
#define FT_MFMA_F32_16X16X32_FP8_FP8 ::ft::detail::MfmaUnavailable<Self>::call
#define FT_MFMA_F32_32X32X16_FP8_FP8 ::ft::detail::MfmaUnavailable<Self>::call
#endif

// Operands and accumulators pass through memcpy into the builtin's vector
// types; the compiler keeps them in registers. An fp8 row checks that the target
// reads its format (atom_layouts.hpp, operands_fit_target).
#define FT_MFMA(id, M, N, K, elem, builtin, operand, targets, asm90a, asm94x)                            \
  struct id : MfmaLayout<M, N, K, Elem::elem> {                                                         \
    template <class Self = id>                                                                          \
    FT_DEVICE static void mma(float (&c)[id::c_regs], const storage (&a)[id::a_regs],                  \
                              const storage (&b)[id::b_regs]) {                                         \
      static_assert(atom_fits_target<Self>(), FT_FP8_FLAVOUR_MISMATCH);                              \
      typename detail::OperandOf<FT_OPERAND_##operand, int(sizeof a)>::type av, bv;                     \
      detail::vec<float, id::c_regs> cv;                                                                \
      __builtin_memcpy(&av, a, sizeof av);                                                              \
      __builtin_memcpy(&bv, b, sizeof bv);                                                              \
      __builtin_memcpy(&cv, c, sizeof cv);                                                              \
      cv = builtin(av, bv, cv, 0, 0, 0);                                                                \
      __builtin_memcpy(c, &cv, sizeof cv);                                                              \
    }                                                                                                   \
  };
#else  // FT_FLAVOUR_EMU
#include "ft/atom_emulate.hpp"
#define FT_MFMA(id, M, N, K, elem, builtin, operand, targets, asm90a, asm94x)                            \
  struct id : MfmaLayout<M, N, K, Elem::elem> {                                                         \
    template <class Self = id>                                                                          \
    FT_DEVICE static void mma(float (&c)[id::c_regs], const storage (&a)[id::a_regs],                  \
                              const storage (&b)[id::b_regs]) {                                         \
      static_assert(atom_fits_target<Self>(), FT_FP8_FLAVOUR_MISMATCH);                              \
      emu::emulate_mma<Self>(c, a, b);                                                                  \
    }                                                                                                   \
  };
#endif

namespace ft::atom {
#include "ft/atoms_mfma.def"
}  // namespace ft::atom
#undef FT_MFMA

#endif  // HIP or EMU
