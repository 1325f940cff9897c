// flytune db model-check's output: the cost model replayed on a database's own
// buckets (search/model_check.hpp), printed as a table with its summary or as JSON.
#pragma once

#include "base/error.hpp"
#include "search/model_check.hpp"
#include "store/store.hpp"

namespace ft::cli {

Status print_model_check(db::Store& store, const model::CheckOptions& co, bool json);

}  // namespace ft::cli
