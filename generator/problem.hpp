#pragma once
// The problem flytune tunes: one Mixture-of-Experts layer (a routed GEMM pair).
//   X [T, H] -> gather by expert -> X W1[e]^T, W1 [E, 2I, H] (gate rows, then up rows)
//   -> SwiGLU -> [T*k, I] -> W2[e]^T, W2 [E, H, I] -> weighted top-k sum -> Y [T, H]
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "templates/ft/int_types.hpp"
#include "templates/ft/moe_args.hpp"

namespace ft {

// e4m3: the 8-bit float of the target's fp8 flavour (targets.def: e4m3fnuz on gfx942,
// OCP e4m3 on gfx950 and sm_90a). An fp8 layer takes X in bf16 (quantised inside the
// layer), W1 and W2 in e4m3 with fp32 scales (Scales), and writes Y in bf16.
enum class DType { bf16, f16, e4m3 };
enum class Activation { swiglu };

// How an fp8 layer's values are scaled: ft::Scales and kScaleGroup, the kernels'
// own (templates/ft/moe_args.hpp documents each scale tensor's shape and layout).

struct Routing {
  enum class Kind { uniform, zipf, hot, replay };
  Kind kind = Kind::uniform;
  double zipf_s = 0;        // zipf:S  expert popularity ~ 1/rank^S
  int hot_experts = 0;      // hot:K   every token picks among the first K experts
  std::string replay_file;  // replay:FILE  recorded top-k expert ids, one token per line
  std::string replay_hash;  // XXH3-64 of the replay file's bytes (hash_replay_file)

  // "uniform", "zipf:1.2", "hot:1", "replay:<file name>#<content hash>": two
  // traces named alike but with other contents are other problems.
  std::string key() const;
  // Pure text: does not read a replay file (hash_replay_file does).
  static Result<Routing> parse(std::string_view text);
  // replay: reads the file (a regular file) and sets replay_hash; others: nothing.
  Status hash_replay_file();
};

struct Problem {
  std::string name;  // preset name or "custom"
  int experts = 0;
  int hidden = 0;
  int inter = 0;
  int topk = 0;
  DType dtype = DType::bf16;
  Scales scales = Scales::none;  // none for bf16 / f16; set for e4m3
  Activation activation = Activation::swiglu;
  Routing routing;

  // Stable identity used as the database key and in export manifests, e.g.
  // "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform" or, for fp8,
  // "moe_e8_h4096_i14336_k2_e4m3:per-tensor_swiglu_uniform".
  std::string key() const;
  // The element type with its scales: "bf16", "f16", "e4m3:per-token" (the key's
  // part, the database's dtype column, manifests and the worker protocol).
  std::string dtype_spec() const;
  bool fp8() const { return dtype == DType::e4m3; }
  Status validate() const;

  // Arithmetic and traffic for a token count, for roofline floors.
  double flops(int tokens) const;               // 6 * T * k * H * I
  double expected_active_experts(int tokens) const;  // uniform routing: E(1-(1-k/E)^T)
  double weight_bytes_active(int tokens) const;
  int element_bytes() const;
};

struct ProblemPreset {
  std::string_view name;
  int experts, hidden, inter, topk;
  std::string_view description;
};
std::span<const ProblemPreset> problem_presets();
Result<Problem> problem_from_preset(std::string_view name);
// A problem file: JSON {"name":..,"experts":..,"hidden":..,"inter":..,"topk":..,
// "dtype":"bf16","routing":"uniform"} (name and dtype/routing optional); fp8:
// "dtype":"fp8" with "scales":"per-tensor" | "per-token" | "block128" | "static" (default per-tensor).
Result<Problem> problem_from_file(const std::string& path);
Result<Problem> problem_from_json_text(std::string_view text, const std::string& origin);

std::string_view to_string(DType d);
// "bf16", "f16"/"fp16", "fp8"/"e4m3"/"fp8_e4m3".
Result<DType> parse_dtype(std::string_view s);
std::string_view to_string(Scales s);  // "none", "per-tensor", "per-token", "block128", "static"
// "per-tensor", "per-token", "block128", "static" (Scales::static_tensor: per-tensor
// weights, the caller's static X and intermediate scales, as FP8 checkpoints ship them).
Result<Scales> parse_scales(std::string_view s);
// A dtype spec (Problem::dtype_spec): "bf16", "f16", or "e4m3:<scales>".
struct DTypeSpec {
  DType dtype = DType::bf16;
  Scales scales = Scales::none;
};
Result<DTypeSpec> parse_dtype_spec(std::string_view s);
std::string_view to_string(Activation a);

// A user-supplied value for a one-line message: at most max_chars of it, then
// "... (N characters)" (a 300-digit number is not repeated in full).
std::string shorten(std::string_view text, std::size_t max_chars = 40);
// Ok for an existing regular file; a clear error for a missing path, a folder,
// or a FIFO/socket/device (which would block or never end a read).
Status check_regular_file(const std::string& path, std::string_view what);

// Default token buckets for search: decode through prefill.
std::vector<int> default_token_buckets();
// "1,2,4,16", "1..16384" (powers of two), or a mix; sorted, unique, each 1..2^24.
Result<std::vector<int>> parse_token_list(std::string_view text);

}  // namespace ft
