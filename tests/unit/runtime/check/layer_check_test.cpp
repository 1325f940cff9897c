// check-export's rows by operation (runtime/check/layer_check.hpp): one row
// per operation of the registry (layer/operation.hpp), in its order, each
// reachable from its operation, and the backward's rows left unchecked (a
// coverage note) exactly where its CPU reference is too costly.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "layer/operation.hpp"
#include "runtime/check/backward_check.hpp"
#include "runtime/check/layer_check.hpp"
#include "tests/support/operation_rows.hpp"

namespace ft {
namespace {

TEST(OperationChecks, OneRowPerOperationInTheRegistrysOrder) {
  test::expect_one_row_per_operation(check::operation_checks());
  std::set<std::string> passes;
  for (const check::OperationCheck& c : check::operation_checks()) {
    SCOPED_TRACE(c.operation().name);
    EXPECT_EQ(check::check_of(c.operation()), &c);
    EXPECT_TRUE(passes.insert(std::string(c.pass)).second) << c.pass;
    EXPECT_NE(c.bucket, nullptr);
    EXPECT_NE(c.unchecked, nullptr);
    EXPECT_NE(c.body, nullptr);
  }
  // The rows' pass names, as check-export's table prints them.
  EXPECT_EQ(check::check_of(op::moe_forward())->pass, "forward");
  EXPECT_EQ(check::check_of(op::moe_backward())->pass, "backward");
  // Every plan has the forward (a row even where no plan is selected); the backward only some.
  EXPECT_EQ(check::check_of(op::moe_forward())->planned, nullptr);
  EXPECT_NE(check::check_of(op::moe_backward())->planned, nullptr);
}

TEST(OperationChecks, TheBackwardIsUncheckedAboveItsReferenceWorkTheForwardNever) {
  const check::OperationCheck& forward = *check::check_of(op::moe_forward());
  const check::OperationCheck& backward = *check::check_of(op::moe_backward());
  ft_problem_shape shape{};
  shape.hidden = 1024, shape.inter = 512, shape.topk = 2, shape.experts = 8;
  // T*k*3*I*H, twice: 2 * T * 3145728 multiply-adds; 635 tokens are under 4e9, 636 above.
  EXPECT_EQ(backward.unchecked(shape, 635), "");
  const std::string note = backward.unchecked(shape, 636);
  EXPECT_NE(note.find("the backward at T=636 is not checked"), std::string::npos) << note;
  EXPECT_NE(note.find("4e+09 multiply-adds"), std::string::npos) << note;
  for (int t : {1, 636, 1 << 20}) EXPECT_EQ(forward.unchecked(shape, t), "") << t;
}

}  // namespace
}  // namespace ft
