// The C API's rows by operation (runtime/src/c_api_operations.hpp): one row
// per operation of the registry (layer/operation.hpp), in its order, each
// reachable from its operation; its plan within a plan; and the C calls that
// walk it (ft_plan_launch_sized, ft_plan_backward_launch_sized) saying the
// row's call and buffers argument in their errors.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "layer/operation.hpp"
#include "runtime/include/flytune_runtime.h"
#include "runtime/src/c_api_operations.hpp"
#include "tests/support/operation_rows.hpp"

namespace ft {
namespace {

TEST(PlanOperations, OneRowPerOperationInTheRegistrysOrder) {
  test::expect_one_row_per_operation(rt::plan_operations());
  std::set<std::string> calls;
  for (const rt::PlanOperation& row : rt::plan_operations()) {
    SCOPED_TRACE(row.operation().name);
    EXPECT_EQ(rt::plan_operation(row.operation()), &row);
    EXPECT_TRUE(calls.insert(row.launch).second) << row.launch;
    EXPECT_NE(row.plan_of, nullptr);
    EXPECT_NE(row.launch_sized, nullptr);
  }
}

// Each row finds its operation's plan within a plan: the forward's is the plan
// itself, the backward's its `backward`, null where the export has none.
TEST(PlanOperations, FindTheirOperationsPlan) {
  rt::Plan plan;
  const rt::PlanOperation& forward = *rt::plan_operation(op::moe_forward());
  const rt::PlanOperation& backward = *rt::plan_operation(op::moe_backward());
  EXPECT_EQ(forward.plan_of(plan), &plan);
  EXPECT_EQ(backward.plan_of(plan), nullptr);
  plan.backward.emplace();
  EXPECT_EQ(forward.plan_of(plan), &plan);
  EXPECT_EQ(backward.plan_of(plan), &*plan.backward);
}

// The C calls of each row, refused a null plan: the row's call and buffers
// argument name the error, as they did before the rows.
TEST(PlanOperations, NameTheirCallInErrors) {
  struct Case {
    const op::Operation& operation;
    int (*call)();
    const char* message;
  };
  const Case cases[] = {
      {op::moe_forward(), [] { return ft_plan_launch_sized(nullptr, nullptr, sizeof(ft_layer_buffers), nullptr); },
       "ft_plan_launch: plan and buffers must not be null"},
      {op::moe_backward(), [] { return ft_plan_backward_launch_sized(nullptr, nullptr, sizeof(ft_layer_grads), nullptr); },
       "ft_plan_backward_launch: plan and grads must not be null"},
  };
  ASSERT_EQ(std::size(cases), rt::plan_operations().size());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.operation.name);
    EXPECT_EQ(c.call(), FT_ERR_ARGUMENT);
    EXPECT_STREQ(ft_runtime_last_error(nullptr), c.message);
    const rt::PlanOperation& row = *rt::plan_operation(c.operation);
    EXPECT_EQ(std::string(row.launch) + ": plan and " + row.buffers + " must not be null", c.message);
  }
  EXPECT_EQ(ft_plan_bucket(nullptr), 0);
  EXPECT_EQ(ft_plan_backward_bucket(nullptr), 0);
  EXPECT_EQ(ft_plan_has_backward(nullptr), 0);
}

}  // namespace
}  // namespace ft
