#include "search/shard.hpp"

#include <algorithm>
#include <charconv>
#include <optional>

#include <fmt/format.h>

namespace ft {
namespace {

// A whole number of decimal digits only (no sign, no spaces).
std::optional<int> whole_number(std::string_view s) {
  if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::string Shard::label() const { return fmt::format("{}/{}", index, count); }

Result<Shard> parse_shard(std::string_view text) {
  const auto slash = text.find('/');
  std::optional<int> index, count;
  if (slash != std::string_view::npos) {
    index = whole_number(text.substr(0, slash));
    count = whole_number(text.substr(slash + 1));
  }
  if (!index || !count || *count < 1 || *index >= *count)
    return fail(Errc::usage,
                fmt::format("'{}' is not a shard I/N (whole numbers, 0 <= I < N), e.g. 0/4",
                            text.size() > 40 ? std::string(text.substr(0, 40)) + "..." : std::string(text)),
                "--shard");
  return Shard{*index, *count};
}

std::vector<int> shard_tokens(std::vector<int> tokens, const Shard& shard) {
  std::sort(tokens.begin(), tokens.end());
  tokens.erase(std::unique(tokens.begin(), tokens.end()), tokens.end());
  std::vector<int> share;
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (static_cast<int>(i % static_cast<std::size_t>(shard.count)) == shard.index) share.push_back(tokens[i]);
  return share;
}

}  // namespace ft
