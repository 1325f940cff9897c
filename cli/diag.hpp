#pragma once
// The tool's edge: errors become one line on stderr and an exit code.
#include <string_view>

#include "generator/error.hpp"

namespace ft::cli {

// Exit codes: 0 ok, 1 error, 2 usage, 3 regression found, 125 skipped (tests).
inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitRegression = 3;
inline constexpr int kExitSkipped = 125;

// Prints "flytune: error: <context>: <message>" and returns the exit code.
int report_error(const Error& e);
void warn(std::string_view message);

}  // namespace ft::cli
