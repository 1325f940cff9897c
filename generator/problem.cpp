#include "generator/problem.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>

namespace ft {

std::string shorten(std::string_view text, std::size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  return fmt::format("{}... ({} characters)", text.substr(0, max_chars), text.size());
}

Status check_regular_file(const std::string& path, std::string_view what) {
  std::error_code ec;
  auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) return fail(Errc::not_found, fmt::format("no such {}", what), path);
  if (std::filesystem::is_directory(st)) return fail(Errc::invalid_input, fmt::format("is a directory, not a {}", what), path);
  if (!std::filesystem::is_regular_file(st))
    return fail(Errc::invalid_input, fmt::format("is not a regular file (a FIFO, socket or device); give a {}", what), path);
  return {};
}

namespace {

constexpr std::array kPresets{
    ProblemPreset{"mixtral-8x7b", 8, 4096, 14336, 2, "Mixtral 8x7B (the default)"},
    ProblemPreset{"mixtral-8x7b-tp2", 8, 4096, 7168, 2, "Mixtral 8x7B, tensor-parallel 2 slice"},
    ProblemPreset{"mixtral-8x7b-tp8", 8, 4096, 1792, 2, "Mixtral 8x7B, tensor-parallel 8 slice"},
    ProblemPreset{"mixtral-8x22b", 8, 6144, 16384, 2, "Mixtral 8x22B"},
    ProblemPreset{"deepseek-v3", 256, 7168, 2048, 8, "DeepSeek-V3 routed experts"},
    ProblemPreset{"qwen3-235b", 128, 4096, 1536, 8, "Qwen3-235B-A22B"},
    ProblemPreset{"qwen3-30b", 128, 2048, 768, 8, "Qwen3-30B-A3B"},
    ProblemPreset{"olmoe", 64, 2048, 1024, 8, "OLMoE-1B-7B"},
    ProblemPreset{"gpt-oss-120b-like", 128, 2880, 2880, 4, "a gpt-oss-120b-like layer (plain SwiGLU)"},
    ProblemPreset{"deepseek-v2-lite", 64, 2048, 1408, 6, "DeepSeek-V2-Lite routed experts (outside the suite)"},
    ProblemPreset{"qwen1.5-moe", 60, 2048, 1408, 4, "Qwen1.5-MoE-A2.7B (outside the suite)"},
    ProblemPreset{"tiny", 4, 256, 512, 2, "small shape for tests and emulation"},
};

constexpr int kMaxTokens = 1 << 24;  // 16777216: token ids are packed into 24 bits
constexpr int kMaxExperts = 1024;
constexpr int kMaxDim = 1 << 20;     // hidden and inter: T*H and E*2I*H stay far inside 64-bit sizes

// A finite number; "nan", "inf" and out-of-range values are refused.
Result<double> parse_double(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size() || !std::isfinite(v))
    return fail(Errc::invalid_input, fmt::format("'{}' is not a finite number", shorten(s)));
  return v;
}

enum class IntError { none, not_integer, too_large };

// An integer of at most `int` range; says whether it was not a number or too large.
std::pair<int, IntError> parse_int_checked(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (p != s.data() + s.size() || (ec != std::errc{} && ec != std::errc::result_out_of_range))
    return {0, IntError::not_integer};
  if (ec == std::errc::result_out_of_range) return {0, IntError::too_large};
  return {v, IntError::none};
}

Result<int> parse_int(std::string_view s) {
  auto [v, err] = parse_int_checked(s);
  if (err == IntError::not_integer) return fail(Errc::invalid_input, fmt::format("'{}' is not an integer", shorten(s)));
  if (err == IntError::too_large) return fail(Errc::invalid_input, fmt::format("'{}' is out of range", shorten(s)));
  return v;
}

// 16 hex digits of the XXH3-64 of a replay file's bytes: two traces with the
// same file name but other contents are other problems.
Result<std::string> replay_file_hash(const std::string& path) {
  FT_CHECK(check_regular_file(path, "routing replay file"));
  std::ifstream in(path, std::ios::binary);
  if (!in) return fail(Errc::io, "cannot read the routing replay file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string bytes = ss.str();
  return fmt::format("{:016x}", XXH3_64bits(bytes.data(), bytes.size()));
}

}  // namespace

std::string Routing::key() const {
  switch (kind) {
    case Kind::uniform: return "uniform";
    case Kind::zipf: return fmt::format("zipf:{:g}", zipf_s);
    case Kind::hot: return fmt::format("hot:{}", hot_experts);
    case Kind::replay:
      return replay_hash.empty() ? fmt::format("replay:{}", std::filesystem::path(replay_file).filename().string())
                                 : fmt::format("replay:{}#{}", std::filesystem::path(replay_file).filename().string(), replay_hash);
  }
  return "?";
}

Result<Routing> Routing::parse(std::string_view text) {
  Routing r;
  auto colon = text.find(':');
  std::string_view head = text.substr(0, colon);
  std::string_view arg = colon == std::string_view::npos ? std::string_view{} : text.substr(colon + 1);
  if (head == "uniform" && colon == std::string_view::npos) return r;
  if (head == "zipf" && !arg.empty()) {
    auto s = parse_double(arg);
    if (!s || *s < 0.001 || *s > 100)
      return fail(Errc::invalid_input,
                  fmt::format("routing '{}': zipf needs a finite exponent from 0.001 to 100, e.g. zipf:1.2", shorten(text)));
    r.kind = Kind::zipf;
    r.zipf_s = *s;
    return r;
  }
  if (head == "hot" && !arg.empty()) {
    auto k = parse_int(arg);
    if (!k || *k <= 0) return fail(Errc::invalid_input, fmt::format("routing '{}': hot needs a positive expert count, e.g. hot:1", shorten(text)));
    r.kind = Kind::hot;
    r.hot_experts = *k;
    return r;
  }
  if (head == "replay" && !arg.empty()) {
    r.kind = Kind::replay;
    r.replay_file = std::string(arg);
    return r;
  }
  return fail(Errc::invalid_input,
              fmt::format("unknown routing '{}'; use uniform, zipf:S, hot:K or replay:FILE", shorten(text)));
}

Status Routing::hash_replay_file() {
  if (kind != Kind::replay) return {};
  replay_hash = FT_TRY(replay_file_hash(replay_file));
  return {};
}

std::string Problem::key() const {
  return fmt::format("moe_e{}_h{}_i{}_k{}_{}_{}_{}", experts, hidden, inter, topk, dtype_spec(), to_string(activation),
                     routing.key());
}

std::string Problem::dtype_spec() const {
  if (scales == Scales::none) return std::string(to_string(dtype));
  return fmt::format("{}:{}", to_string(dtype), to_string(scales));
}

Status Problem::validate() const {
  auto bad = [&](std::string what) { return fail(Errc::invalid_input, std::move(what), "problem " + name); };
  if (experts < 1 || experts > kMaxExperts) return bad(fmt::format("experts must be 1..{}, got {}", kMaxExperts, experts));
  if (topk < 1 || topk > experts) return bad(fmt::format("topk must be 1..experts ({}), got {}", experts, topk));
  if (topk > 255) return bad("topk must be below 256 (slot ids are packed into 8 bits)");
  if (hidden < 64 || hidden % 64 != 0 || hidden > kMaxDim)
    return bad(fmt::format("hidden must be a positive multiple of 64 up to {}, got {}", kMaxDim, hidden));
  if (inter < 64 || inter % 64 != 0 || inter > kMaxDim)
    return bad(fmt::format("inter must be a positive multiple of 64 up to {}, got {}", kMaxDim, inter));
  if (fp8() && scales == Scales::none)
    return bad("an fp8 (e4m3) problem needs its scales: per-tensor, per-token, block128 or static");
  if (!fp8() && scales != Scales::none)
    return bad(fmt::format("scales ({}) apply to fp8 problems only, not to {}", to_string(scales), to_string(dtype)));
  // fp8 k-tiles are 128 bytes deep and the intermediate's scale groups 128 wide.
  if (fp8() && (hidden % kScaleGroup != 0 || inter % kScaleGroup != 0))
    return bad(fmt::format("an fp8 problem needs hidden and inter multiples of {}, got {} and {}", kScaleGroup, hidden, inter));
  if (routing.kind == Routing::Kind::hot && routing.hot_experts > experts)
    return bad(fmt::format("routing hot:{} names more experts than the problem has ({})", routing.hot_experts, experts));
  if (routing.kind == Routing::Kind::hot && routing.hot_experts < topk)
    return bad(fmt::format("routing hot:{} has fewer experts than topk ({})", routing.hot_experts, topk));
  return {};
}

int Problem::element_bytes() const { return dtype == DType::e4m3 ? 1 : 2; }

double Problem::flops(int tokens) const { return 6.0 * tokens * topk * double(hidden) * inter; }

double Problem::expected_active_experts(int tokens) const {
  return experts * (1.0 - std::pow(1.0 - double(topk) / experts, tokens));
}

double Problem::weight_bytes_active(int tokens) const {
  double per_expert = 3.0 * double(hidden) * inter * element_bytes();
  return expected_active_experts(tokens) * per_expert;
}

std::span<const ProblemPreset> problem_presets() { return kPresets; }

Result<Problem> problem_from_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (p.name == name) {
      Problem pr;
      pr.name = std::string(p.name);
      pr.experts = p.experts;
      pr.hidden = p.hidden;
      pr.inter = p.inter;
      pr.topk = p.topk;
      return pr;
    }
  }
  std::string known;
  for (const auto& p : kPresets) known += (known.empty() ? "" : ", ") + std::string(p.name);
  return fail(Errc::invalid_input, fmt::format("unknown problem '{}'; built-in problems: {} (or give a JSON file)", name, known));
}

Result<Problem> problem_from_json_text(std::string_view text, const std::string& origin) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return fail(Errc::invalid_input, "not a JSON object; expected {\"experts\":8,\"hidden\":4096,\"inter\":14336,\"topk\":2}", origin);
  Problem p;
  p.name = "custom";
  // Range-checked before narrowing: 4294967304 must not wrap to 8.
  auto get_int = [&](const char* key, int& out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return fail(Errc::invalid_input, fmt::format("missing \"{}\"", key), origin);
    if (!it->is_number_integer()) return fail(Errc::invalid_input, fmt::format("\"{}\" must be an integer", key), origin);
    const bool fits = it->is_number_unsigned() ? it->get<std::uint64_t>() <= std::uint64_t(INT32_MAX)
                                               : it->get<std::int64_t>() >= INT32_MIN && it->get<std::int64_t>() <= INT32_MAX;
    if (!fits) return fail(Errc::invalid_input, fmt::format("\"{}\" is {}, far outside its range", key, shorten(it->dump())), origin);
    out = it->get<int>();
    return {};
  };
  FT_CHECK(get_int("experts", p.experts));
  FT_CHECK(get_int("hidden", p.hidden));
  FT_CHECK(get_int("inter", p.inter));
  FT_CHECK(get_int("topk", p.topk));
  for (auto it = j.begin(); it != j.end(); ++it) {
    static constexpr std::array known{"name", "experts", "hidden", "inter", "topk", "dtype", "scales", "routing", "activation"};
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      return fail(Errc::invalid_input, fmt::format("unknown key \"{}\"", it.key()), origin);
  }
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string()) return fail(Errc::invalid_input, "\"name\" must be a string", origin);
    p.name = it->get<std::string>();
  }
  if (auto it = j.find("dtype"); it != j.end()) {
    if (!it->is_string()) return fail(Errc::invalid_input, "\"dtype\" must be a string", origin);
    auto d = parse_dtype_spec(it->get<std::string>());
    if (!d) return std::unexpected(with_context(d.error(), origin));
    p.dtype = d->dtype;
    p.scales = d->scales;
  }
  if (auto it = j.find("scales"); it != j.end()) {
    if (!it->is_string()) return fail(Errc::invalid_input, "\"scales\" must be a string", origin);
    auto s = parse_scales(it->get<std::string>());
    if (!s) return std::unexpected(with_context(s.error(), origin));
    p.scales = *s;
  }
  if (p.fp8() && p.scales == Scales::none) p.scales = Scales::per_tensor;
  if (auto it = j.find("activation"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>() != "swiglu")
      return fail(Errc::invalid_input, "\"activation\" must be \"swiglu\" (the only one implemented)", origin);
  }
  if (auto it = j.find("routing"); it != j.end()) {
    if (!it->is_string()) return fail(Errc::invalid_input, "\"routing\" must be a string", origin);
    auto r = Routing::parse(it->get<std::string>());
    if (!r) return std::unexpected(with_context(r.error(), origin));
    p.routing = *r;
    if (auto h = p.routing.hash_replay_file(); !h) return std::unexpected(with_context(h.error(), origin));
  }
  auto v = p.validate();
  if (!v) return std::unexpected(with_context(v.error(), origin));
  return p;
}

Result<Problem> problem_from_file(const std::string& path) {
  // A FIFO or device would block the read (or never end): refuse it first.
  FT_CHECK(check_regular_file(path, "problem file"));
  std::ifstream in(path);
  if (!in) return fail(Errc::io, "cannot read the problem file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return problem_from_json_text(ss.str(), path);
}

std::string_view to_string(DType d) {
  switch (d) {
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::e4m3: return "e4m3";
  }
  return "?";
}

Result<DType> parse_dtype(std::string_view s) {
  if (s == "bf16") return DType::bf16;
  if (s == "f16" || s == "fp16") return DType::f16;
  if (s == "fp8" || s == "e4m3" || s == "fp8_e4m3") return DType::e4m3;
  return fail(Errc::invalid_input, fmt::format("unknown dtype '{}'; use bf16, f16 or fp8", shorten(s)));
}

std::string_view to_string(Scales s) {
  switch (s) {
    case Scales::none: return "none";
    case Scales::per_tensor: return "per-tensor";
    case Scales::per_token: return "per-token";
    case Scales::block128: return "block128";
    case Scales::static_tensor: return "static";
  }
  return "?";
}

Result<Scales> parse_scales(std::string_view s) {
  for (Scales v : {Scales::per_tensor, Scales::per_token, Scales::block128, Scales::static_tensor})
    if (s == to_string(v)) return v;
  return fail(Errc::invalid_input, fmt::format("unknown scales '{}'; use per-tensor, per-token, block128 or static", shorten(s)));
}

Result<DTypeSpec> parse_dtype_spec(std::string_view s) {
  const auto colon = s.find(':');
  DTypeSpec spec;
  spec.dtype = FT_TRY(parse_dtype(s.substr(0, colon)));
  if (colon != std::string_view::npos) {
    if (spec.dtype != DType::e4m3)
      return fail(Errc::invalid_input, fmt::format("dtype '{}': scales apply to fp8 (e4m3) only", shorten(s)));
    spec.scales = FT_TRY(parse_scales(s.substr(colon + 1)));
  }
  return spec;
}

std::string_view to_string(Activation) { return "swiglu"; }

std::vector<int> default_token_buckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

Result<std::vector<int>> parse_token_list(std::string_view text) {
  const std::string_view whole = text;
  std::vector<int> out;
  auto bad = [&](std::string_view part, std::string_view why) {
    return fail(Errc::invalid_input, fmt::format("token list '{}': {}; e.g. 1,16,64 or 1..16384", shorten(whole),
                                                 fmt::format(fmt::runtime(why), shorten(part))));
  };
  // One count: a positive integer up to 2^24.
  auto count = [&](std::string_view part) -> Result<int> {
    auto [v, err] = parse_int_checked(part);
    if (part.empty()) return bad(part, "an empty entry (two commas in a row, or a comma at an end)");
    if (err == IntError::too_large || (err == IntError::none && v > kMaxTokens))
      return bad(part, fmt::format("'{{}}' is above the limit of {} (2^24) tokens", kMaxTokens));
    if (err != IntError::none || v < 1) return bad(part, "'{}' is not a positive count or a range A..B");
    return v;
  };
  while (true) {
    auto comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    if (auto dots = part.find(".."); dots != std::string_view::npos) {
      int lo = FT_TRY(count(part.substr(0, dots)));
      int hi = FT_TRY(count(part.substr(dots + 2)));
      if (hi < lo) return bad(part, "the range '{}' ends below its start");
      // Powers of two from lo up, and hi itself: the buckets a runtime looks up.
      for (long v = lo; v < hi; v *= 2) out.push_back(int(v));
      out.push_back(hi);
    } else {
      out.push_back(FT_TRY(count(part)));
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace ft
