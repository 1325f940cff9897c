#include "cli/problem_options.hpp"

#include <filesystem>

namespace ft::cli {

void add_problem_options(CLI::App* app, ProblemOptions& opt) {
  app->add_option("--problem", opt.problem, "Built-in problem name (mixtral-8x7b, deepseek-v3, ...) or a JSON problem file")
      ->capture_default_str();
  app->add_option("--experts", opt.experts, "Number of experts E");
  app->add_option("--hidden", opt.hidden, "Hidden size H");
  app->add_option("--inter", opt.inter, "Intermediate size I (per expert)");
  app->add_option("--topk", opt.topk, "Experts per token k");
  app->add_option("--dtype", opt.dtype, "Element type: bf16 or f16");
  app->add_option("--routing", opt.routing, "Routing: uniform, zipf:S, hot:K or replay:FILE");
}

Result<Problem> resolve_problem(const ProblemOptions& opt) {
  const bool is_file = opt.problem.ends_with(".json") || opt.problem.find('/') != std::string::npos;
  Problem p = FT_TRY(is_file ? problem_from_file(opt.problem) : problem_from_preset(opt.problem));
  const bool custom = opt.experts || opt.hidden || opt.inter || opt.topk;
  if (opt.experts) p.experts = *opt.experts;
  if (opt.hidden) p.hidden = *opt.hidden;
  if (opt.inter) p.inter = *opt.inter;
  if (opt.topk) p.topk = *opt.topk;
  if (custom) p.name = "custom";
  if (!opt.dtype.empty()) p.dtype = FT_TRY(parse_dtype(opt.dtype));
  if (!opt.routing.empty()) p.routing = FT_TRY(Routing::parse(opt.routing));
  FT_CHECK(p.validate());
  return p;
}

}  // namespace ft::cli
