#include "generator/problem.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace ft {
namespace {

constexpr std::array kPresets{
    ProblemPreset{"mixtral-8x7b", 8, 4096, 14336, 2, "Mixtral 8x7B (the default)"},
    ProblemPreset{"mixtral-8x7b-tp2", 8, 4096, 7168, 2, "Mixtral 8x7B, tensor-parallel 2 slice"},
    ProblemPreset{"mixtral-8x7b-tp8", 8, 4096, 1792, 2, "Mixtral 8x7B, tensor-parallel 8 slice"},
    ProblemPreset{"mixtral-8x22b", 8, 6144, 16384, 2, "Mixtral 8x22B"},
    ProblemPreset{"deepseek-v3", 256, 7168, 2048, 8, "DeepSeek-V3 routed experts"},
    ProblemPreset{"qwen3-235b", 128, 4096, 1536, 8, "Qwen3-235B-A22B"},
    ProblemPreset{"qwen3-30b", 128, 2048, 768, 8, "Qwen3-30B-A3B"},
    ProblemPreset{"tiny", 4, 256, 512, 2, "small shape for tests and emulation"},
};

Result<double> parse_double(std::string_view s) {
  double v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return fail(Errc::invalid_input, fmt::format("'{}' is not a number", s));
  return v;
}

Result<int> parse_int(std::string_view s) {
  int v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || p != s.data() + s.size()) return fail(Errc::invalid_input, fmt::format("'{}' is not an integer", s));
  return v;
}

}  // namespace

std::string Routing::key() const {
  switch (kind) {
    case Kind::uniform: return "uniform";
    case Kind::zipf: return fmt::format("zipf:{:g}", zipf_s);
    case Kind::hot: return fmt::format("hot:{}", hot_experts);
    case Kind::replay: return fmt::format("replay:{}", std::filesystem::path(replay_file).filename().string());
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
    if (!s || *s <= 0) return fail(Errc::invalid_input, fmt::format("routing '{}': zipf needs a positive exponent, e.g. zipf:1.2", text));
    r.kind = Kind::zipf;
    r.zipf_s = *s;
    return r;
  }
  if (head == "hot" && !arg.empty()) {
    auto k = parse_int(arg);
    if (!k || *k <= 0) return fail(Errc::invalid_input, fmt::format("routing '{}': hot needs a positive expert count, e.g. hot:1", text));
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
              fmt::format("unknown routing '{}'; use uniform, zipf:S, hot:K or replay:FILE", text));
}

std::string Problem::key() const {
  return fmt::format("moe_e{}_h{}_i{}_k{}_{}_{}_{}", experts, hidden, inter, topk, to_string(dtype),
                     to_string(activation), routing.key());
}

Status Problem::validate() const {
  auto bad = [&](std::string what) { return fail(Errc::invalid_input, std::move(what), "problem " + name); };
  if (experts < 1 || experts > 1024) return bad(fmt::format("experts must be 1..1024, got {}", experts));
  if (topk < 1 || topk > experts) return bad(fmt::format("topk must be 1..experts ({}), got {}", experts, topk));
  if (topk > 255) return bad("topk must be below 256 (slot ids are packed into 8 bits)");
  if (hidden < 64 || hidden % 64 != 0) return bad(fmt::format("hidden must be a positive multiple of 64, got {}", hidden));
  if (inter < 64 || inter % 64 != 0) return bad(fmt::format("inter must be a positive multiple of 64, got {}", inter));
  if (routing.kind == Routing::Kind::hot && routing.hot_experts > experts)
    return bad(fmt::format("routing hot:{} names more experts than the problem has ({})", routing.hot_experts, experts));
  if (routing.kind == Routing::Kind::hot && routing.hot_experts < topk)
    return bad(fmt::format("routing hot:{} has fewer experts than topk ({})", routing.hot_experts, topk));
  return {};
}

int Problem::element_bytes() const { return 2; }

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
  auto get_int = [&](const char* key, int& out) -> Status {
    auto it = j.find(key);
    if (it == j.end()) return fail(Errc::invalid_input, fmt::format("missing \"{}\"", key), origin);
    if (!it->is_number_integer()) return fail(Errc::invalid_input, fmt::format("\"{}\" must be an integer", key), origin);
    out = it->get<int>();
    return {};
  };
  FT_CHECK(get_int("experts", p.experts));
  FT_CHECK(get_int("hidden", p.hidden));
  FT_CHECK(get_int("inter", p.inter));
  FT_CHECK(get_int("topk", p.topk));
  for (auto it = j.begin(); it != j.end(); ++it) {
    static constexpr std::array known{"name", "experts", "hidden", "inter", "topk", "dtype", "routing", "activation"};
    if (std::find(known.begin(), known.end(), it.key()) == known.end())
      return fail(Errc::invalid_input, fmt::format("unknown key \"{}\"", it.key()), origin);
  }
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string()) return fail(Errc::invalid_input, "\"name\" must be a string", origin);
    p.name = it->get<std::string>();
  }
  if (auto it = j.find("dtype"); it != j.end()) {
    if (!it->is_string()) return fail(Errc::invalid_input, "\"dtype\" must be a string", origin);
    auto d = parse_dtype(it->get<std::string>());
    if (!d) return std::unexpected(with_context(d.error(), origin));
    p.dtype = *d;
  }
  if (auto it = j.find("activation"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>() != "swiglu")
      return fail(Errc::invalid_input, "\"activation\" must be \"swiglu\" (the only one implemented)", origin);
  }
  if (auto it = j.find("routing"); it != j.end()) {
    if (!it->is_string()) return fail(Errc::invalid_input, "\"routing\" must be a string", origin);
    auto r = Routing::parse(it->get<std::string>());
    if (!r) return std::unexpected(with_context(r.error(), origin));
    p.routing = *r;
  }
  auto v = p.validate();
  if (!v) return std::unexpected(with_context(v.error(), origin));
  return p;
}

Result<Problem> problem_from_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return fail(Errc::io, "cannot read the problem file", path);
  std::stringstream ss;
  ss << in.rdbuf();
  return problem_from_json_text(ss.str(), path);
}

std::string_view to_string(DType d) { return d == DType::bf16 ? "bf16" : "f16"; }

Result<DType> parse_dtype(std::string_view s) {
  if (s == "bf16") return DType::bf16;
  if (s == "f16" || s == "fp16") return DType::f16;
  if (s == "fp8" || s == "e4m3" || s == "fp8_e4m3")
    return fail(Errc::invalid_input, fmt::format("dtype '{}' is not supported yet (fp8 atoms are planned); use bf16 or f16", s));
  return fail(Errc::invalid_input, fmt::format("unknown dtype '{}'; use bf16 or f16", s));
}

std::string_view to_string(Activation) { return "swiglu"; }

std::vector<int> default_token_buckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
}

Result<std::vector<int>> parse_token_list(std::string_view text) {
  std::vector<int> out;
  auto bad = [&](std::string_view part) {
    return fail(Errc::invalid_input,
                fmt::format("token list '{}': '{}' is not a positive count or a range A..B; e.g. 1,16,64 or 1..16384", text, part));
  };
  while (!text.empty()) {
    auto comma = text.find(',');
    std::string_view part = text.substr(0, comma);
    if (auto dots = part.find(".."); dots != std::string_view::npos) {
      auto lo = parse_int(part.substr(0, dots));
      auto hi = parse_int(part.substr(dots + 2));
      if (!lo || !hi || *lo < 1 || *hi < *lo || *hi > (1 << 24)) return bad(part);
      // Powers of two from lo up, and hi itself: the buckets a runtime looks up.
      for (long v = *lo; v < *hi; v *= 2) out.push_back(int(v));
      out.push_back(*hi);
    } else {
      auto v = parse_int(part);
      if (!v || *v < 1 || *v > (1 << 24)) return bad(part);
      out.push_back(*v);
    }
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  if (out.empty()) return bad("");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

}  // namespace ft
