#pragma once

namespace ft::cli {

// Parses the command line, runs the chosen subcommand, returns the exit code.
// Never throws.
int run_app(int argc, char** argv);

}  // namespace ft::cli
