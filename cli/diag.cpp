#include "cli/diag.hpp"

#include <cstdio>

#include <fmt/format.h>

namespace ft::cli {

int report_error(const Error& e) {
  fmt::print(stderr, "flytune: error: {}\n", e.describe());
  std::fflush(stderr);
  return e.code == Errc::usage ? kExitUsage : kExitError;
}

void warn(std::string_view message) { fmt::print(stderr, "flytune: warning: {}\n", message); }

}  // namespace ft::cli
