#pragma once
// The tool's edge: errors become one line on stderr and an exit code.

#include "generator/error.hpp"

namespace ft::cli {

// Exit codes: 0 ok, 1 error (a regression in `report` too), 2 usage,
// 130 a search stopped by Ctrl-C (its results kept).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitInterrupted = 130;

// Prints "flytune: error: <context>: <message>" and returns the exit code.
int report_error(const Error& e);

}  // namespace ft::cli
