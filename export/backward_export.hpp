#pragma once
// Internal to ft_export: the backward winners (flytune search --pass
// backward|both: kind layer, pass backward; their variants row of kind
// backward names a configuration per role of op::moe_backward, each a `grad`
// row with its parameters and code object) as the exported problems' backward
// buckets (manifest ProblemEntry::backward; docs/EXPORT.md).
#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "base/error.hpp"
#include "export/export.hpp"
#include "export/export_parts.hpp"
#include "manifest/manifest.hpp"
#include "store/store.hpp"

namespace ft::db {

struct BackwardSource {
  const ExportOptions& options;    // its target and problem filters
  std::int64_t device_id = 0;      // the forward winners' device (and src's toolchain): the backward's must be theirs
  std::function<const manifest::SupportUnit*(DType)> support;  // the export's unit of a dtype (null: none)
};

// Adds each backward winner to its problem in `man` (which holds the forward's
// problems). One that cannot be exported as measured -- no forward of its
// problem in the export, another toolchain, a program this flytune does not
// build from its configurations -- is left out with a note in `summary`; a
// database that is inconsistent (a configuration row or code object missing)
// is an error.
Status add_backward(const WinnerSource& src, const BackwardSource& backward, manifest::Manifest& man, ExportSummary& summary);

}  // namespace ft::db
