#pragma once
// The backward pass's GEMM kernels (docs/TRAINING.md), one configuration type
// for three operations (BackwardOp):
//   wgrad         the K-grouped GEMM of the weight gradients, dW_e = A_e^T B_e,
//                 each expert reducing over its own ragged token rows
//                 (templates/ft/moe_kgrouped.hpp, ft::KGroupedArgs);
//   dgrad_swiglu  the stage-2 backward: dInter = (w dY) W2_e over the forward's
//                 sorted rows, the SwiGLU backward and d(topk_weights) in its
//                 epilogue (templates/ft/moe_dgrad.hpp, ft::DgradArgs);
//   dgrad_scatter the stage-1 backward: dX += dH W1_e, the top-k scatter-add.
// The tiled machinery's shape axes over an mfma / mma.sync atom (and, for
// wgrad on sm_90a, a wgmma atom: templates/ft/moe_kgrouped_wgmma.hpp, operands
// MN-major in shared memory, a cp.async ring of 3 or more stages), the table
// of rules a configuration must pass, its space, its launch and its emitted unit.
//
// Not yet a member of the stage-family registry (family.hpp): that registry's
// variants are forward stage kernels in a StageRole over ft::MoeArgs, and the
// backward's kernels take their own argument structs. The operation registry
// is where they join the search, the store and the export.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "generator/atoms.hpp"
#include "base/error.hpp"
#include "generator/family.hpp"
#include "generator/kernel_source.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"

namespace ft {

enum class BackwardOp { wgrad, dgrad_swiglu, dgrad_scatter };
std::string_view to_string(BackwardOp op);  // "kgrouped", "dgrad2", "dgrad1": the names' token
std::optional<BackwardOp> parse_backward_op(std::string_view s);

struct BackwardVariant {
  const Target* target = nullptr;
  const AtomInfo* atom = nullptr;  // an mfma or mma.sync atom (or wgmma, wgrad only); its dtype is the variant's
  int tile_m = 64, tile_n = 64, tile_k = 32;  // wgrad: tile_k token rows per step of the reduction
  int warps_m = 2, warps_n = 2;
  int stages = 2;  // LDS buffers: 1 single, 2 ping-pong; the wgmma form's cp.async ring: 3 to 8
  BackwardOp op = BackwardOp::wgrad;

  // ft_<target>_<op>_<dtype>_m64n64k32_w2x2_<atom>_s2 (kgrouped, dgrad2, dgrad1): the unit, its symbol, its golden file.
  std::string name() const;
  int threads() const;
  int lds_bytes() const;          // the kernels' kSmemBytes (the emitted unit static_asserts it)
  int register_estimate() const;  // per lane, a pre-compile estimate

  // {"op", "atom", "tile_m", "tile_n", "tile_k", "warps_m", "warps_n", "stages"}: a
  // `grad` row's params and the worker protocol's configuration (the target is
  // the row's, or the message's).
  nlohmann::json to_json() const;
  // The configuration of `target` that to_json wrote: every member given and of
  // its type, no other member, the op and atom known, and the rule table passed;
  // Errc::invalid_input with the first thing wrong.
  static Result<BackwardVariant> from_json(const nlohmann::json& j, const Target& target);
};

// Why a configuration cannot be built on its target, or nullopt: the rows of
// the rule table, in order (backward_gemm.cpp).
std::optional<std::string> why_illegal(const BackwardVariant& v);
// Why it cannot compute its GEMM, or nullopt. wgrad: C [E, m, n] (tile_m | m,
// tile_n | n); dgrad: a reduction of `m` (tile_k | m) into n columns (tile_n | n).
std::optional<std::string> why_illegal_for(const BackwardVariant& v, int m, int n);
// Both GEMMs of its op on a 16-bit problem: wgrad dW2 (m = H, n = I) and dW1
// (m = 2I, n = H); dgrad_swiglu K = H, n = I; dgrad_scatter K = 2I, n = H.
std::optional<std::string> why_illegal_for(const BackwardVariant& v, const Problem& p);

// Every legal configuration of the preset's values for a target, dtype and op, in a fixed order.
std::vector<BackwardVariant> backward_space(const Target& t, DType d, Preset preset = Preset::default_,
                                            BackwardOp op = BackwardOp::wgrad);

// wgrad: grid (m / tile_m, n / tile_n, E), the block and its dynamic LDS.
LaunchShape kgrouped_launch(const BackwardVariant& v, int experts, int m, int n);
// dgrad: grid (max_padded_rows / tile_m, n / tile_n); the forward's row block must be a multiple of tile_m.
LaunchShape dgrad_launch(const BackwardVariant& v, long long max_padded_rows, int n);

// The instantiation unit: one entry point, name(), taking ft::KGroupedArgs (wgrad) or ft::DgradArgs.
// Errors: Errc::invalid_input with why_illegal's line.
Result<KernelSource> emit_backward(const BackwardVariant& v);

}  // namespace ft
