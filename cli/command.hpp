#pragma once
// One subcommand: its CLI11 sub-app (options bound to its own options struct)
// and the function that runs it once parsed, returning the exit code.
#include <functional>

#include <CLI/CLI.hpp>

namespace ft::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

}  // namespace ft::cli
