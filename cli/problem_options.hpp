#pragma once
// The problem options several subcommands share: --problem NAME|FILE, or the
// shape spelled out with --experts/--hidden/--inter/--topk, plus --dtype,
// --scales and --routing. Explicit sizes override the named problem's.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "generator/problem.hpp"
#include "generator/space.hpp"
#include "generator/target.hpp"

namespace ft::cli {

struct ProblemOptions {
  std::string problem = "mixtral-8x7b";
  std::optional<int> experts, hidden, inter, topk;
  std::string dtype;
  std::string scales;
  std::string routing;
};

void add_problem_options(CLI::App* app, ProblemOptions& opt);
// Bad option values are usage errors (exit 2); a bad problem file is an error (exit 1).
Result<Problem> resolve_problem(const ProblemOptions& opt);

// The option parsers the subcommands share, each turning a bad value into a
// usage error that names the option.
Result<std::vector<int>> parse_tokens_option(const std::string& text, std::string_view option = "--tokens");
Result<SpaceOptions> parse_space_option(const std::string& text);
Result<const Target*> parse_target_option(const std::string& name);

}  // namespace ft::cli
