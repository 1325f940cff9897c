// The export's readers of recorded recipes (export/export_parts.hpp): one row
// per operation of the registry (layer/operation.hpp), in its order, so that
// export_bucket reads a winner of any operation.
#include <gtest/gtest.h>

#include "export/export_parts.hpp"
#include "tests/support/operation_rows.hpp"

namespace ft {
namespace {

TEST(RecipeReaders, OneRowPerOperationInTheRegistrysOrder) {
  test::expect_one_row_per_operation(db::recipe_readers());
  for (const db::RecipeReader& r : db::recipe_readers()) EXPECT_NE(r.read, nullptr) << r.operation().name;
}

}  // namespace
}  // namespace ft
