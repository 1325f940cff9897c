#pragma once
// The freestanding device headers, compiled on the host: the kernels' own
// argument structs and enums (templates/ft/moe_args.hpp), number formats
// (elem.hpp, numeric.hpp: bf16 / f16 / fp8 conversions, round to nearest
// even; NaN kept, fp8 saturating),
// weight layouts (weight_layout.hpp: shuffled and tiled offsets), random
// inputs (random.hpp) and instruction shape rules (shape_rules.hpp). The host -- legality, workloads, references, the export
// check, the layer program -- calls these very functions and fills these very
// structs, so its bytes and rules are the kernels' by construction rather
// than by a mirror kept in step. The two macros are the ones port_emu.hpp
// defines (the same tokens, so a unit that also includes the emulator's port
// sees no conflicting definition).
#include "templates/ft/int_types.hpp"
#include "templates/ft/moe_args.hpp"

#ifndef FT_HOST_DEVICE
#define FT_HOST_DEVICE inline
#endif
#ifndef FT_MEMCPY
#define FT_MEMCPY(dst, src, bytes) __builtin_memcpy(dst, src, bytes)
#endif
#ifndef FT_MEMCPY_ALIGNED
#define FT_MEMCPY_ALIGNED(dst, src, bytes) __builtin_memcpy(dst, src, bytes)
#endif

#include "templates/ft/elem.hpp"
#include "templates/ft/numeric.hpp"
#include "templates/ft/random.hpp"
#include "templates/ft/shape_rules.hpp"
#include "templates/ft/tensor_map.hpp"
#include "templates/ft/weight_layout.hpp"
