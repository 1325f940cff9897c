#pragma once
// Merging flytune databases (flytune db merge): the results of several
// machines or shards in one file, with their provenance. docs/DB.md, "Merging".
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"

namespace ft::db {

struct MergeSummary {
  // Rows per table in OUT before and after the merge (table name, count).
  std::vector<std::pair<std::string, std::int64_t>> rows_before, rows_after;
  int winners_changed = 0;  // winners OUT did not have, or that a faster input winner replaced
};

// Merges the databases `inputs` into `out` (created if missing) in one
// transaction. Inputs are opened read-only and first of all: a missing,
// foreign, corrupt or older-schema input fails before OUT is opened. Rows are
// re-keyed by identity (devices, toolchains, problems, variants by kernel name +
// target + toolchain, code objects by hash, runs by start time + host + command
// line + options, measurements by every column), so merging twice adds nothing.
// Winners are re-derived: per (problem, device, tokens, kind) the lowest median
// among OUT's and the inputs' winners; two candidates built by different
// toolchains (backend + version) are refused. On any error OUT is left as it
// was (a file this call created is removed).
Result<MergeSummary> merge_databases(const std::string& out, const std::vector<std::string>& inputs);

}  // namespace ft::db
