#include "cli/diag.hpp"

#include <cstdio>

#include <fmt/format.h>

namespace ft::cli {

int report_error(const Error& e) {
  fmt::print(stderr, "flytune: error: {}\n", e.describe());
  std::fflush(stderr);
  return e.code == Errc::usage ? kExitUsage : kExitError;
}

}  // namespace ft::cli
