#include "search/strategy.hpp"

#include <algorithm>
#include <array>

#include <fmt/format.h>

namespace ft {

// The factories, one per row (each defined in its strategy's file).
#define FT_STRATEGY(name, factory, help) std::unique_ptr<Strategy> factory(const StrategyOptions&);
#include "search/strategies.def"
#undef FT_STRATEGY

namespace {

constexpr std::array kStrategies{
#define FT_STRATEGY(name, factory, help) StrategyInfo{#name, help, &factory},
#include "search/strategies.def"
#undef FT_STRATEGY
};

}  // namespace

std::span<const StrategyInfo> strategies() { return kStrategies; }

std::string_view default_strategy() { return kStrategies.front().name; }

std::string strategy_names(std::string_view last_separator) {
  std::string out;
  for (std::size_t i = 0; i < kStrategies.size(); ++i) {
    if (i > 0) out += i + 1 == kStrategies.size() ? last_separator : std::string_view(", ");
    out += kStrategies[i].name;
  }
  return out;
}

std::string strategy_help() {
  std::string out;
  for (const StrategyInfo& s : kStrategies)
    out += fmt::format("{}{}{}: {}", out.empty() ? "" : "; ", s.name, s.name == default_strategy() ? " (default)" : "",
                       s.help);
  return out;
}

Status check_strategy(std::string_view name) {
  for (const StrategyInfo& s : kStrategies)
    if (s.name == name) return {};
  return fail(Errc::usage, fmt::format("unknown strategy '{}'; use {}", shorten(std::string(name)), strategy_names()));
}

Result<std::unique_ptr<Strategy>> make_strategy(std::string_view name, const StrategyOptions& options) {
  FT_CHECK(check_strategy(name));
  const auto it = std::find_if(kStrategies.begin(), kStrategies.end(), [&](const StrategyInfo& s) { return s.name == name; });
  return it->make(options);
}

Status StageTimer::read_store(const std::function<Status(db::Store&)>&) {
  return fail(Errc::internal, "this stage timer has no store to read");
}

void StageTimer::note(const std::string&) {}

void sort_fastest_first(Ranked& ranked) {
  std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
}

std::optional<Ranked> time_each(const std::vector<const Candidate*>& which, std::string_view phase, int reps,
                                StageTimer& timer) {
  Ranked timed;
  for (const Candidate* c : which) {
    if (timer.stopped()) return std::nullopt;
    if (auto t = timer.time(*c, phase, reps)) timed.emplace_back(*t, c);
    timer.screened(*c);
  }
  sort_fastest_first(timed);
  return timed;
}

}  // namespace ft
