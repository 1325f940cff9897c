// The executor's kernel table (layer/execute.hpp, RoleKernels): one slot per
// launch role, indexed by Role, so every role -- the forward's, the support
// steps', the backward's -- binds through the same table, and a step binds
// to its own role's slot and to no other.
#include <gtest/gtest.h>

#include <cstddef>
#include <set>
#include <string>

#include "layer/execute.hpp"

namespace ft {
namespace {

// A program of one launch step of role `r`.
LayerProgram one_step(Role r) {
  LayerProgram p;
  Step s;
  s.op = Step::Op::launch;
  s.role = r;
  s.name = "step_" + std::string(to_string(r));
  p.steps.push_back(s);
  return p;
}

FunctionHandle handle(std::size_t i) { return FunctionHandle{reinterpret_cast<void*>(i + 1)}; }

class RoleTable : public ::testing::TestWithParam<std::size_t> {};

TEST(RoleTable, EveryRoleHasItsOwnNameAndTheCountEndsTheList) {
  std::set<std::string> names;
  for (std::size_t i = 0; i < kRoleCount; ++i) {
    const std::string name(to_string(Role(i)));
    EXPECT_NE(name, "?") << "role " << i << " has no name";
    EXPECT_TRUE(names.insert(name).second) << name << " names two roles";
  }
  // A role appended to the enum without kRoleCount moved to it has a name here.
  EXPECT_EQ(to_string(Role(kRoleCount)), "?");
  EXPECT_EQ(RoleKernels{}.by_role.size(), kRoleCount);
}

// Each role's slot holds its own kernel: a table of every role, each with a
// handle of its own, binds a step of that role to that handle.
TEST_P(RoleTable, AStepBindsItsRolesSlot) {
  const Role r = Role(GetParam());
  RoleKernels k;
  for (std::size_t i = 0; i < kRoleCount; ++i) k.of(Role(i)) = handle(i);
  EXPECT_EQ(k.of(r).p, handle(GetParam()).p);
  auto fns = bind(one_step(r), k);
  ASSERT_TRUE(fns) << fns.error().describe();
  ASSERT_EQ(fns->size(), 1u);
  EXPECT_EQ((*fns)[0].p, handle(GetParam()).p) << to_string(r);
}

// A table with every slot but this role's filled refuses a step of the role,
// naming it: no other role's kernel stands in.
TEST_P(RoleTable, AStepOfAnEmptySlotIsRefusedByName) {
  const Role r = Role(GetParam());
  RoleKernels k;
  for (std::size_t i = 0; i < kRoleCount; ++i)
    if (i != GetParam()) k.of(Role(i)) = handle(i);
  EXPECT_EQ(k.of(r).p, nullptr);
  auto fns = bind(one_step(r), k);
  ASSERT_FALSE(fns) << to_string(r);
  EXPECT_EQ(fns.error().code, Errc::internal);
  EXPECT_NE(fns.error().message.find("no " + std::string(to_string(r)) + " kernel"), std::string::npos)
      << fns.error().message;
}

TEST(RoleTable, AMemsetStepBindsNoKernel) {
  LayerProgram p = one_step(Role::stage1);
  Step clear;
  clear.op = Step::Op::memset_u32;
  clear.name = "clear_y_acc";
  p.steps.insert(p.steps.begin(), clear);
  RoleKernels k;
  k.of(Role::stage1) = handle(7);
  auto fns = bind(p, k);
  ASSERT_TRUE(fns) << fns.error().describe();
  ASSERT_EQ(fns->size(), 2u);
  EXPECT_EQ((*fns)[0].p, nullptr);
  EXPECT_EQ((*fns)[1].p, handle(7).p);
}

INSTANTIATE_TEST_SUITE_P(EveryRole, RoleTable, ::testing::Range<std::size_t>(0, kRoleCount),
                         [](const auto& info) { return std::string(to_string(Role(info.param))); });

}  // namespace
}  // namespace ft
