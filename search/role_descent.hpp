#pragma once
// One step of coordinate descent over the roles of a program (the backward
// search, search/backward_search.cpp): programs are one configuration per
// role; the first is the base and the others each differ from it in one role.
// A role's fastest configuration is the one of the fastest timed program among
// the base and those varying that role; the program of every role's fastest
// is the step's result when it changes the base in two roles or more and is
// not already one of the programs (what a one-role variation already is, or
// what was timed, needs no second look).
#include <cstddef>
#include <optional>
#include <vector>

namespace ft {

// programs[i]: a configuration index per role; median_us[i]: its time, nullopt
// when it was not timed (failed verification or timing). Nullopt: no step.
inline std::optional<std::vector<std::size_t>> role_descent_step(const std::vector<std::vector<std::size_t>>& programs,
                                                                 const std::vector<std::optional<double>>& median_us) {
  if (programs.empty() || median_us.size() != programs.size() || !median_us[0]) return std::nullopt;
  const std::vector<std::size_t>& base = programs[0];
  std::vector<std::size_t> best = base;
  std::vector<double> best_us(base.size(), *median_us[0]);
  for (std::size_t i = 1; i < programs.size(); ++i) {
    if (!median_us[i] || programs[i].size() != base.size()) continue;
    std::size_t differs = 0, role = 0;
    for (std::size_t r = 0; r < base.size(); ++r)
      if (programs[i][r] != base[r]) ++differs, role = r;
    if (differs != 1 || *median_us[i] >= best_us[role]) continue;
    best[role] = programs[i][role];
    best_us[role] = *median_us[i];
  }
  std::size_t changed = 0;
  for (std::size_t r = 0; r < base.size(); ++r) changed += best[r] != base[r];
  if (changed < 2) return std::nullopt;
  for (const auto& p : programs)
    if (p == best) return std::nullopt;
  return best;
}

}  // namespace ft
