#pragma once
// A table of rows by operation (a row's `operation` names its op::Operation,
// as check-export's OperationCheck and the export's RecipeReader do) holds one
// row per operation of the registry (layer/operation.hpp), in its order.
#include <gtest/gtest.h>

#include <cstddef>
#include <span>

#include "layer/operation.hpp"

namespace ft::test {

template <class Row>
void expect_one_row_per_operation(std::span<const Row> rows) {
  const auto operations = op::operations();
  ASSERT_EQ(rows.size(), operations.size());
  for (std::size_t i = 0; i < rows.size(); ++i)
    EXPECT_EQ(&rows[i].operation(), operations[i]) << "row " << i << " is not " << operations[i]->name << "'s";
}

}  // namespace ft::test
