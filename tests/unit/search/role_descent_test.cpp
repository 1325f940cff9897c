// One step of coordinate descent over a program's roles (search/role_descent.hpp),
// table-driven: the base and its one-role variations timed, the combined program
// of each role's fastest configuration, or none.
#include "search/role_descent.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace ft {
namespace {

using Configs = std::vector<std::vector<std::size_t>>;
using Times = std::vector<std::optional<double>>;

struct Case {
  const char* what;
  Configs programs;
  Times us;
  std::optional<std::vector<std::size_t>> step;
};

TEST(RoleDescent, CombinesEachRolesFastestConfiguration) {
  const Configs four_roles{{0, 1, 2, 2}, {5, 1, 2, 2}, {0, 1, 7, 2}, {0, 1, 2, 7}, {0, 1, 8, 2}};
  const Case cases[] = {
      {"two roles faster than the base: both taken", four_roles, {100.0, 120.0, 90.0, 95.0, 99.0},
       std::vector<std::size_t>{0, 1, 7, 7}},
      {"the fastest of a role's variations wins it", four_roles, {100.0, 90.0, 98.0, 95.0, 93.0},
       std::vector<std::size_t>{5, 1, 8, 7}},
      {"one role faster: that variation is already a program", four_roles, {100.0, 120.0, 90.0, 101.0, 99.0}, std::nullopt},
      {"nothing faster than the base", four_roles, {100.0, 120.0, 100.0, 101.0, 130.0}, std::nullopt},
      {"untimed variations are not taken", four_roles, {100.0, std::nullopt, 90.0, std::nullopt, 99.0}, std::nullopt},
      {"an untimed base: no step", four_roles, {std::nullopt, 90.0, 90.0, 90.0, 90.0}, std::nullopt},
      {"the combination already timed", Configs{{0, 0}, {1, 0}, {0, 1}, {1, 1}}, {100.0, 90.0, 90.0, 95.0}, std::nullopt},
      {"a program that varies two roles is not a variation", Configs{{0, 0}, {1, 1}, {0, 2}}, {100.0, 50.0, 90.0}, std::nullopt},
      {"no programs", Configs{}, Times{}, std::nullopt},
  };
  for (const Case& c : cases) EXPECT_EQ(role_descent_step(c.programs, c.us), c.step) << c.what;
}

}  // namespace
}  // namespace ft
