#pragma once
// The device headers' number formats and weight layouts, compiled on the host:
// templates/ft/numeric.hpp (bf16 / f16 / fp8 conversions, round to nearest even;
// NaN kept, fp8 saturating) and templates/ft/weight_layout.hpp (shuffled and tiled offsets). The host
// (workloads, references, the export check) calls these very functions, so its
// bytes are the kernels' by construction rather than by a mirror kept in step.
// The two macros are the ones port_emu.hpp defines (the same tokens, so a unit
// that also includes the emulator's port sees no conflicting definition).
#include "templates/ft/int_types.hpp"
#include "templates/ft/moe_args.hpp"

#ifndef FT_HOST_DEVICE
#define FT_HOST_DEVICE inline
#endif
#ifndef FT_MEMCPY
#define FT_MEMCPY(dst, src, bytes) __builtin_memcpy(dst, src, bytes)
#endif

#include "templates/ft/elem.hpp"
#include "templates/ft/numeric.hpp"
#include "templates/ft/weight_layout.hpp"
