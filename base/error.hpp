#pragma once
// Errors as values: every library function that can fail returns Result<T>.
// Only cli/ turns an Error into text and an exit code (cli/diag.cpp).
#include <expected>
#include <string>
#include <utility>

namespace ft {

enum class Errc {
  usage,          // bad flags or arguments (exit 2)
  invalid_input,  // malformed problem, space, file contents
  not_found,      // a file, target or variant that does not exist
  toolchain,      // compiler missing or unable to build for a target
  compile,        // a variant failed to compile
  device,         // GPU runtime error
  no_device,      // no GPU of the needed kind present
  database,       // SQLite error, corrupt/foreign/newer database
  io,             // file system
  verify,         // result mismatch
  timeout,
  interrupted,    // Ctrl-C
  internal,
};

struct Error {
  Errc code = Errc::internal;
  std::string message;  // what is wrong, and what to do where that helps
  std::string context;  // what it concerns: a target, a file, a kernel name

  // "context: message", the form cli/diag.cpp prints after "flytune: error: ".
  std::string describe() const { return context.empty() ? message : context + ": " + message; }
};

template <class T>
using Result = std::expected<T, Error>;
using Status = std::expected<void, Error>;

inline std::unexpected<Error> fail(Errc code, std::string message, std::string context = {}) {
  return std::unexpected(Error{code, std::move(message), std::move(context)});
}

// Prefix an error's context ("gfx942" + "ft_...": "gfx942: ft_...").
inline Error with_context(Error e, const std::string& outer) {
  e.context = e.context.empty() ? outer : outer + ": " + e.context;
  return e;
}

}  // namespace ft

// FT_TRY(expr): evaluate a Result, return its error from the enclosing
// function, otherwise yield the value (GNU statement expression; g++ and clang).
#define FT_TRY(...)                                                   \
  ({                                                                  \
    auto ft_try_r_ = (__VA_ARGS__);                                   \
    if (!ft_try_r_) return std::unexpected(std::move(ft_try_r_).error()); \
    std::move(*ft_try_r_);                                            \
  })

// FT_CHECK(expr): for Status-returning calls.
#define FT_CHECK(...)                                                 \
  do {                                                                \
    auto ft_check_r_ = (__VA_ARGS__);                                 \
    if (!ft_check_r_) return std::unexpected(std::move(ft_check_r_).error()); \
  } while (0)
