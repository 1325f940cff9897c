#pragma once
// The tool's edge: errors become one line on stderr and an exit code.

#include <string>
#include <string_view>

#include "base/error.hpp"

namespace ft::cli {

// Exit codes: 0 ok, 1 error, 2 usage (an unknown command or flag, or a bad
// option value), 3 a regression found by `report`, 4 a search that left token
// buckets without a layer winner (its results kept; `--allow-missing`
// accepts it), 130 a search stopped by Ctrl-C (its results kept).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitRegression = 3;
inline constexpr int kExitMissingLayers = 4;
inline constexpr int kExitInterrupted = 130;

// Prints "flytune: error: <context>: <message>" (control characters escaped,
// so the line stays one line) and returns the exit code.
int report_error(const Error& e);

// Control characters as \n, \t, \x1b; newlines kept when keep_newlines.
std::string escape_control(std::string_view text, bool keep_newlines);

// A bad value of a command-line option is a usage error (exit 2), whichever
// parser found it; `option` ("--space") becomes the error's outer context.
Error as_usage(Error e, std::string_view option);

}  // namespace ft::cli
