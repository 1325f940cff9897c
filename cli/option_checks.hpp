#pragma once
// Validators for numeric options with short messages. CLI11's own
// NonNegativeNumber/PositiveNumber print their bound, DBL_MAX, as a 309-digit
// number; these say what is allowed in words. A failed check is a usage error
// (exit 2) naming the option.
#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace ft::cli {

// A whole number >= min (0 or 1), at most 2^63-1.
inline CLI::Validator whole_number_at_least(std::int64_t min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        std::int64_t v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec == std::errc::result_out_of_range) return "is too large (at most 9223372036854775807)";
        if (ec != std::errc{} || end != text.data() + text.size()) return "must be a whole number";
        if (v < min) return min == 0 ? "must be 0 or more" : "must be 1 or more";
        return {};
      },
      min == 0 ? "INT>=0" : "INT>=1");
}

// A finite number of seconds >= 0 (no "inf", no "nan").
inline CLI::Validator finite_seconds() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double v = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (ec != std::errc{} || end != text.data() + text.size() || !std::isfinite(v)) return "must be a finite number of seconds";
        if (v < 0) return "must be 0 or more seconds";
        return {};
      },
      "SECONDS>=0");
}

}  // namespace ft::cli
