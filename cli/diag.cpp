#include "cli/diag.hpp"

#include <cstdio>

#include <fmt/format.h>

namespace ft::cli {

std::string escape_control(std::string_view text, bool keep_newlines) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (c == '\n' && keep_newlines) out += '\n';
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) out += fmt::format("\\x{:02x}", c);
    else out += static_cast<char>(c);
  }
  return out;
}

int report_error(const Error& e) {
  // One line: names and paths the user typed may hold newlines or terminal
  // escape codes; they are shown escaped. A compiler's log (compile and
  // toolchain errors) keeps its lines below the first, escaped, line.
  const bool has_log = e.code == Errc::compile || e.code == Errc::toolchain;
  std::string message = e.message, log;
  if (auto nl = message.find('\n'); has_log && nl != std::string::npos) {
    log = message.substr(nl + 1);
    message.erase(nl);
  }
  std::string line = escape_control(e.context.empty() ? message : e.context + ": " + message, false);
  fmt::print(stderr, "flytune: error: {}\n", line);
  if (!log.empty()) fmt::print(stderr, "{}\n", escape_control(log, true));
  std::fflush(stderr);
  return e.code == Errc::usage ? kExitUsage : kExitError;
}

Error as_usage(Error e, std::string_view option) {
  e.code = Errc::usage;
  if (!option.empty()) e = with_context(std::move(e), std::string(option));
  return e;
}

}  // namespace ft::cli
