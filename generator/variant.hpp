#pragma once
// One point of the variant space: every compile-time choice of one MoE-stage
// kernel. Problem sizes are run-time arguments, so a variant serves every
// problem whose shapes it divides.
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "generator/atoms.hpp"
#include "generator/error.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"

namespace ft {

enum class KernelKind { moe1, moe2 };        // stage 1 (gate/up + SwiGLU), stage 2 (down + scatter)
enum class Reduction { atomic, partials };   // stage 2: fp32 atomics into [T,H], or per-slot partials
enum class WeightLayoutKind { plain, shuffled, tiled };  // templates/ft/weight_layout.hpp

struct Variant {
  const Target* target = nullptr;
  KernelKind kind = KernelKind::moe1;
  DType dtype = DType::bf16;
  const AtomInfo* atom = nullptr;
  int tile_m = 64, tile_n = 128, tile_k = 64;
  int warps_m = 2, warps_n = 2;              // waves (AMD) / warps (NVIDIA) per block and their layout
  int stages = 2;                            // LDS buffers: 1 single, 2 ping-pong (wgmma: ring depth)
  bool warp_specialized = false;             // wgmma only: a producer warpgroup copies (weights tiled), the others compute
  int tiles_per_block = 1;                   // warp-specialised only: > 1 makes blocks persistent, each computing
                                             // about this many tiles in turn, its ring running on across them
  int split_k = 1;                           // stage 2 only
  bool weight_in_stage1 = false;             // routed weight applied by stage 1 (stage 2 then skips it)
  Reduction reduce = Reduction::atomic;      // stage 2 only
  WeightLayoutKind layout = WeightLayoutKind::plain;

  int threads() const;
  // Dynamic LDS / shared memory of one block; the emitted source static_asserts
  // that the device templates agree.
  int lds_bytes() const;
  // Registers per lane the kernel needs at least (accumulators, fragments,
  // staged copies); a pre-compile estimate used by legality.
  int register_estimate() const;
  int weight_matrices() const { return kind == KernelKind::moe1 ? 2 : 1; }

  // The database key, exported symbol and golden-file name, e.g.
  // ft_gfx942_moe1_bf16_m64n128k64_w2x2_mfma16x16x16_s2.
  std::string name() const;
  nlohmann::json to_json() const;
  static Result<Variant> from_json(const nlohmann::json& j);
};

std::string_view to_string(KernelKind k);
std::string_view to_string(Reduction r);
std::string_view to_string(WeightLayoutKind l);

}  // namespace ft
