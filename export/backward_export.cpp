#include "export/backward_export.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "layer/operation.hpp"
#include "store/kind.hpp"

namespace ft::db {
Status add_backward(const WinnerSource& src, const BackwardSource& backward, manifest::Manifest& man, ExportSummary& summary) {
  WinnerFilter f;
  f.kind = kind_text(Kind::layer);
  f.pass = Pass::backward;
  f.device_id = backward.device_id;
  f.arch = backward.options.target;
  f.problem_key = backward.options.problem;
  for (const WinnerRow& row : FT_TRY(src.store.winners(f))) {
    const std::string what = fmt::format("{} backward T={}", row.problem.key, row.winner.tokens);
    auto pe = std::ranges::find_if(man.problems, [&](const manifest::ProblemEntry& e) { return e.key == row.problem.key; });
    if (pe == man.problems.end()) {
      summary.notes.push_back(fmt::format("{}: not exported: the export has no forward layer of this problem", what));
      continue;
    }
    if (row.variant.toolchain_id != src.toolchain_id) {
      summary.notes.push_back(fmt::format("{}: not exported: its kernels were built by another toolchain than the forward's", what));
      continue;
    }
    const manifest::SupportUnit* support = backward.support(pe->problem.dtype);
    if (!support) return fail(Errc::internal, "no support unit for the backward's dtype", what);
    BucketOrNote bucket = FT_TRY(export_bucket(op::moe_backward(), src, pe->problem, *support, row, what));
    if (!bucket) {
      summary.notes.push_back(fmt::format("{}: not exported: {}; search this bucket again", what, bucket.error()));
      continue;
    }
    pe->backward.push_back(std::move(*bucket));
    ++summary.backward_buckets;
  }
  for (manifest::ProblemEntry& pe : man.problems)
    std::ranges::sort(pe.backward, {}, &manifest::Bucket::tokens);
  return {};
}

}  // namespace ft::db
