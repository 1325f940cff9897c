#include "cli/problem_options.hpp"

#include <filesystem>

#include "cli/diag.hpp"

namespace ft::cli {

void add_problem_options(CLI::App* app, ProblemOptions& opt) {
  app->add_option("--problem", opt.problem, "Built-in problem name (mixtral-8x7b, deepseek-v3, ...) or a JSON problem file")
      ->capture_default_str();
  app->add_option("--experts", opt.experts, "Number of experts E");
  app->add_option("--hidden", opt.hidden, "Hidden size H");
  app->add_option("--inter", opt.inter, "Intermediate size I (per expert)");
  app->add_option("--topk", opt.topk, "Experts per token k");
  app->add_option("--dtype", opt.dtype, "Element type: bf16, f16 or fp8 (e4m3 in the target's flavour: OCP on sm_90a and gfx950, fnuz on gfx942)");
  app->add_option("--scales", opt.scales, "fp8 scales: per-tensor (the default), per-token, block128 or static (docs/USAGE.md)");
  app->add_option("--routing", opt.routing, "Routing: uniform, zipf:S, hot:K or replay:FILE");
}

// Bad values typed on the command line are usage errors (exit 2); a problem
// file that cannot be read or holds bad values is an error (exit 1).
Result<Problem> resolve_problem(const ProblemOptions& opt) {
  const bool is_file = opt.problem.ends_with(".json") || opt.problem.find('/') != std::string::npos;
  Problem p;
  if (is_file) {
    p = FT_TRY(problem_from_file(opt.problem));
  } else {
    auto preset = problem_from_preset(opt.problem);
    if (!preset) return std::unexpected(as_usage(preset.error(), "--problem"));
    p = *preset;
  }
  const bool custom = opt.experts || opt.hidden || opt.inter || opt.topk;
  if (opt.experts) p.experts = *opt.experts;
  if (opt.hidden) p.hidden = *opt.hidden;
  if (opt.inter) p.inter = *opt.inter;
  if (opt.topk) p.topk = *opt.topk;
  if (custom) p.name = "custom";
  if (!opt.dtype.empty()) {
    auto d = parse_dtype_spec(opt.dtype);
    if (!d) return std::unexpected(as_usage(d.error(), "--dtype"));
    p.dtype = d->dtype;
    p.scales = d->scales;
  }
  if (!opt.scales.empty()) {
    auto s = parse_scales(opt.scales);
    if (!s) return std::unexpected(as_usage(s.error(), "--scales"));
    if (!p.fp8()) return fail(Errc::usage, "--scales applies to fp8 problems only; add --dtype fp8");
    p.scales = *s;
  }
  if (p.fp8() && p.scales == Scales::none) p.scales = Scales::per_tensor;
  if (!p.fp8()) p.scales = Scales::none;
  if (!opt.routing.empty()) {
    auto r = Routing::parse(opt.routing);
    if (!r) return std::unexpected(as_usage(r.error(), "--routing"));
    p.routing = *r;
    FT_CHECK(p.routing.hash_replay_file());
  }
  if (auto v = p.validate(); !v) {
    const bool from_options = custom || !opt.routing.empty() || !opt.dtype.empty();
    return std::unexpected(from_options ? as_usage(v.error(), "") : v.error());
  }
  return p;
}

Result<std::vector<int>> parse_tokens_option(const std::string& text, std::string_view option) {
  auto t = parse_token_list(text);
  if (!t) return std::unexpected(as_usage(t.error(), option));
  return t;
}

Result<SpaceOptions> parse_space_option(const std::string& text) {
  auto s = SpaceOptions::parse(text);
  if (!s) return std::unexpected(as_usage(s.error(), "--space"));
  return s;
}

Result<const Target*> parse_target_option(const std::string& name) {
  auto t = lookup_target(name);
  if (!t) return std::unexpected(as_usage(t.error(), "--target"));
  return t;
}

}  // namespace ft::cli
