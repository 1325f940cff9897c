#include "export/backward_export.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "layer/backward.hpp"
#include "layer/operation.hpp"
#include "store/kind.hpp"

namespace ft::db {
namespace {

// The recipe a backward winner's program row names: for each role, its `grad`
// configuration read back from the row's parameters (and named as recorded).
Result<LayerRecipe> backward_recipe(Store& store, const Target& target, const Problem& p, const WinnerRow& row,
                                    std::map<Role, std::string>& kernels, const std::string& what) {
  LayerRecipe r{&target, p, {}};
  for (const op::GradRole& role : op::moe_backward().grad) {
    const std::string key(to_string(role.launch));
    if (!row.variant.params.contains(key) || !row.variant.params.at(key).is_string())
      return fail(Errc::database, fmt::format("backward program {} names no {} configuration", row.variant.kernel_name, key), what);
    const std::string name = row.variant.params.at(key).get<std::string>();
    const VariantRecord config = FT_TRY(stage_row(store, target, row.variant.toolchain_id, name, what));
    BackwardVariant v = FT_TRY(BackwardVariant::from_json(config.params, target));
    if (v.name() != name)
      return fail(Errc::database, fmt::format("the {} row's parameters name {}, not {}", key, v.name(), name), what);
    r.grad.push_back({role.launch, std::move(v)});
    kernels[role.launch] = name;
  }
  return r;
}

}  // namespace

Status add_backward(Store& store, ObjectSet& objects, const BackwardSource& src, manifest::Manifest& man, ExportSummary& summary) {
  WinnerFilter f;
  f.kind = kind_text(Kind::layer);
  f.pass = Pass::backward;
  f.device_id = src.device_id;
  f.arch = src.options.target;
  f.problem_key = src.options.problem;
  for (const WinnerRow& row : FT_TRY(store.winners(f))) {
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
    const manifest::SupportUnit* support = src.support(pe->problem.dtype);
    if (!support) return fail(Errc::internal, "no support unit for the backward's dtype", what);
    std::map<Role, std::string> kernels;
    LayerRecipe recipe = FT_TRY(backward_recipe(store, *man.target, pe->problem, row, kernels, what));
    recipe.wide_align = support->wide_align();
    auto built = build_backward_program(recipe, row.winner.tokens);
    if (!built) {
      summary.notes.push_back(fmt::format("{}: not exported: {}; search this bucket again", what, built.error().message));
      continue;
    }
    std::map<Role, std::string> files;
    for (const auto& [role, name] : kernels)
      files[role] = FT_TRY(stage_code_object(store, objects, *man.target, src.toolchain_id, name, what));
    pe->backward.push_back(bucket_of(row, std::move(recipe), std::move(*built), support->code_object, files, src.runs));
    ++summary.backward_buckets;
  }
  for (manifest::ProblemEntry& pe : man.problems)
    std::ranges::sort(pe.backward, {}, &manifest::Bucket::tokens);
  return {};
}

}  // namespace ft::db
