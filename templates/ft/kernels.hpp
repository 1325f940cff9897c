#pragma once
// Everything an instantiation unit (generator/emitter.cpp) needs: the port,
// the atoms for the target being compiled, and the MoE layer's kernels.
#include "ft/port.hpp"
#include "ft/moe_args.hpp"
#include "ft/weight_layout.hpp"
#include "ft/atom_mfma.hpp"
#include "ft/atom_mma_sync.hpp"
#include "ft/atom_wgmma.hpp"
#include "ft/tiled_gemm.hpp"
#include "ft/wgmma_gemm.hpp"
#include "ft/tile_order.hpp"
#include "ft/moe_align.hpp"
#include "ft/moe_stage1.hpp"
#include "ft/moe_stage2.hpp"
#include "ft/moe_reduce.hpp"
#include "ft/reference.hpp"
#include "ft/random_fill.hpp"
