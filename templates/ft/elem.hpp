#pragma once
// The element types of matrix operands, as one enum the device templates
// (numeric.hpp: conversions; the atoms: operand storage) and the host
// (generator/atoms.hpp: an atom row's operand type and size) share. Plain
// constexpr, no includes, so the host reads it as data; on the device the
// functions are also the port's FT_HOST_DEVICE (nvcc wants that even for
// constexpr ones).
#if defined(FT_HOST_DEVICE)
#define FT_ELEM_FN FT_HOST_DEVICE constexpr
#else
#define FT_ELEM_FN constexpr
#endif

namespace ft {

// bf16, f16: 16-bit floats. e4m3: OCP float8_e4m3fn (bias 7, max 448, NaN
// S.1111.111, no infinities). e4m3fnuz: bias 8, max 240, a single NaN 0x80,
// no negative zero, no infinities. gfx942 MFMA reads e4m3fnuz; gfx950 MFMA and
// sm_90a wgmma / mma.sync read e4m3 (generator/targets.def's fp8 column).
enum class Elem { bf16, f16, e4m3, e4m3fnuz };

FT_ELEM_FN int elem_bytes(Elem e) { return e == Elem::e4m3 || e == Elem::e4m3fnuz ? 1 : 2; }
FT_ELEM_FN bool is_fp8(Elem e) { return elem_bytes(e) == 1; }

}  // namespace ft
