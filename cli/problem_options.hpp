#pragma once
// The problem options several subcommands share: --problem NAME|FILE, or the
// shape spelled out with --experts/--hidden/--inter/--topk, plus --dtype and
// --routing. Explicit sizes override the named problem's.
#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "generator/problem.hpp"

namespace ft::cli {

struct ProblemOptions {
  std::string problem = "mixtral-8x7b";
  std::optional<int> experts, hidden, inter, topk;
  std::string dtype;
  std::string routing;
};

void add_problem_options(CLI::App* app, ProblemOptions& opt);
Result<Problem> resolve_problem(const ProblemOptions& opt);

}  // namespace ft::cli
