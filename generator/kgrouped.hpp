#pragma once
// The K-grouped GEMM family of the backward pass (templates/ft/moe_kgrouped.hpp,
// docs/TRAINING.md): the weight gradients dW_e = A_e^T B_e, each expert
// reducing over its own ragged token rows. Its own configuration (the tiled
// machinery's shape axes over an mfma / mma.sync atom), the table of rules a
// configuration must pass, its space, its launch and its emitted unit.
//
// Not yet a member of the stage-family registry (family.hpp): that registry's
// variants are forward stage kernels in a StageRole over ft::MoeArgs, and the
// backward's kernels take their own argument struct (KGroupedArgs). The
// operation registry is where it joins the search, the store and the export.
#include <optional>
#include <string>
#include <vector>

#include "generator/atoms.hpp"
#include "base/error.hpp"
#include "generator/family.hpp"
#include "generator/kernel_source.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"

namespace ft {

struct KGroupedVariant {
  const Target* target = nullptr;
  const AtomInfo* atom = nullptr;  // an mfma or mma.sync atom; its dtype is the variant's
  int tile_m = 64, tile_n = 64, tile_k = 32;  // tile_k: token rows per step of the reduction
  int warps_m = 2, warps_n = 2;
  int stages = 2;  // LDS buffers: 1 single, 2 ping-pong

  // ft_<target>_kgrouped_<dtype>_m64n64k32_w2x2_<atom>_s2: the unit, its symbol, its golden file.
  std::string name() const;
  int threads() const;
  int lds_bytes() const;          // ft::KGrouped::kSmemBytes (the emitted unit static_asserts it)
  int register_estimate() const;  // per lane, a pre-compile estimate
};

// Why a configuration cannot be built on its target, or nullopt: the rows of
// the family's rule table, in order (kgrouped.cpp).
std::optional<std::string> why_illegal(const KGroupedVariant& v);
// Why it cannot compute C [E, m, n] (tile_m | m, tile_n | n), or nullopt.
std::optional<std::string> why_illegal_for(const KGroupedVariant& v, int m, int n);
// Both weight gradients of a 16-bit problem: dW2 (m = H, n = I) and dW1 (m = 2I, n = H).
std::optional<std::string> why_illegal_for(const KGroupedVariant& v, const Problem& p);

// Every legal configuration of the preset's values for a target and dtype, in a fixed order.
std::vector<KGroupedVariant> kgrouped_space(const Target& t, DType d, Preset preset = Preset::default_);

// Grid (m / tile_m, n / tile_n, E), the block and its dynamic LDS.
LaunchShape kgrouped_launch(const KGroupedVariant& v, int experts, int m, int n);

// The instantiation unit: one entry point, name(), taking ft::KGroupedArgs.
// Errors: Errc::invalid_input with why_illegal's line.
Result<KernelSource> emit_kgrouped(const KGroupedVariant& v);

}  // namespace ft
