#include "export/export_parts.hpp"

#include <optional>
#include <string_view>

#include "generator/backward_gemm.hpp"
#include "generator/version.hpp"
#include "store/layer_record.hpp"

namespace ft::db {

Result<VariantRecord> stage_row(Store& store, const Target& target, std::int64_t toolchain_id, const std::string& kernel,
                                const std::string& what) {
  VariantFilter f;
  f.kernel_name = kernel;
  f.target = std::string(target.name);
  f.toolchain_id = toolchain_id;
  auto vs = FT_TRY(store.variants(f));
  if (vs.empty() || vs.front().code_object_hash.empty())
    return fail(Errc::database, fmt::format("no compiled code object for {}", kernel), what);
  return std::move(vs.front());
}

Result<std::string> stage_code_object(Store& store, ObjectSet& objects, const Target& target, std::int64_t toolchain_id,
                                      const std::string& kernel, const std::string& what) {
  const VariantRecord row = FT_TRY(stage_row(store, target, toolchain_id, kernel, what));
  return objects.from_store(row.code_object_hash, kernel);
}

namespace {

// The recipe a forward layer winner's row names: its two stage variants as
// recorded (store/layer_record.hpp), with the names recorded beside them.
Result<RecordedRecipe> forward_recipe(const WinnerSource& src, const Problem& p, const WinnerRow& row, const std::string& what) {
  auto record = LayerRecord::from_params(row.variant.params);
  if (!record) return std::unexpected(with_context(std::move(record).error(), what));
  auto stages = record->variants();
  if (!stages) return std::unexpected(with_context(std::move(stages).error(), what));
  auto& [v1, v2] = *stages;
  return RecordedRecipe{LayerRecipe{&src.target, p, {std::move(v1), std::move(v2)}}, {record->stage1_kernel, record->stage2_kernel}};
}

// The recipe a backward winner's program row names: for each role, its `grad`
// configuration read back from the row's parameters, with the name recorded.
Result<RecordedRecipe> backward_recipe(const WinnerSource& src, const Problem& p, const WinnerRow& row, const std::string& what) {
  RecordedRecipe r{LayerRecipe{&src.target, p, {}}, {}};
  for (const op::GradRole& role : op::moe_backward().grad) {
    const std::string key(to_string(role.launch));
    if (!row.variant.params.contains(key) || !row.variant.params.at(key).is_string())
      return fail(Errc::database, fmt::format("backward program {} names no {} configuration", row.variant.kernel_name, key), what);
    const std::string name = row.variant.params.at(key).get<std::string>();
    const VariantRecord config = FT_TRY(stage_row(src.store, src.target, row.variant.toolchain_id, name, what));
    BackwardVariant v = FT_TRY(BackwardVariant::from_json(config.params, src.target));
    r.recipe.grad.push_back({role.launch, std::move(v)});
    r.kernels.push_back(name);
  }
  return r;
}

// One row per operation, in op::operations() order (tests/unit/export/export_parts_test.cpp).
const RecipeReader kRecipeReaders[] = {
    {op::moe_forward, forward_recipe},
    {op::moe_backward, backward_recipe},
};

manifest::Bucket bucket_of(const WinnerRow& row, LayerRecipe recipe, LayerProgram prog, const std::string& support,
                           const std::map<Role, std::string>& files, const std::map<std::int64_t, RunRecord>& runs) {
  manifest::Bucket b;
  b.tokens = row.winner.tokens;
  b.kernel_name = row.variant.kernel_name;
  b.recipe = std::move(recipe);
  b.program = std::move(prog);
  for (const Step& st : b.program.steps)
    if (st.op == Step::Op::launch) {
      const auto it = files.find(st.role);
      b.code_objects[st.symbol] = it != files.end() ? it->second : support;
    }
  b.time_us = {row.winner.median_us, row.winner.p10_us, row.winner.p90_us};
  b.provenance.variant_id = row.variant.id;
  b.provenance.run_id = row.winner.run_id;
  b.provenance.chosen_at = row.winner.chosen_at;
  if (auto it = runs.find(row.winner.run_id); it != runs.end())
    b.provenance.run = manifest::Provenance::Run{it->second.flytune_version, it->second.git_commit,
                                                 it->second.templates_commit, it->second.hostname};
  b.speedup_vs_default = row.winner.speedup_vs_default;
  // The KGroupedArgs its wgrad kernels read: this flytune's where the winner's run compiled them
  // from the same templates, else the struct before c16 (a database an earlier flytune searched
  // holds kernels that would write fp32 through a null dw1: the runtime refuses dw1_16 for them).
  if (!b.recipe.grad.empty()) {
    const std::string_view templates = FLYTUNE_TEMPLATES_COMMIT;
    const bool same = b.provenance.run && templates != "unknown" && b.provenance.run->templates_commit == templates;
    b.kgrouped_args_bytes = same ? sizeof(KGroupedArgs) : manifest::kKGroupedArgsBeforeC16;
  }
  return b;
}

// The first launch step whose support kernel the unit lacks: its note, or "".
std::string missing_support(const LayerProgram& prog, const manifest::SupportUnit& support) {
  for (const Step& st : prog.steps) {
    const std::optional<Support> s = st.op == Step::Op::launch ? support_of(st.role) : std::nullopt;
    if (s && support.symbol(*s).empty())
      return fmt::format("its {} step runs the support kernel {} ({}), which the database's support unit lacks", st.name,
                         to_string(*s), support_info(*s).meaning);
  }
  return {};
}

}  // namespace

std::span<const RecipeReader> recipe_readers() { return kRecipeReaders; }

Result<RecordedRecipe> recorded_recipe(const op::Operation& op, const WinnerSource& src, const Problem& p, const WinnerRow& row,
                                       const std::string& what) {
  for (const RecipeReader& r : kRecipeReaders)
    if (&r.operation() == &op) return r.read(src, p, row, what);
  return fail(Errc::internal, fmt::format("export reads no recipe of {}", op.name), what);
}

Result<BucketOrNote> export_bucket(const op::Operation& op, const WinnerSource& src, const Problem& problem,
                                   const manifest::SupportUnit& support, const WinnerRow& row, const std::string& what) {
  RecordedRecipe recorded = FT_TRY(recorded_recipe(op, src, problem, row, what));
  LayerRecipe& recipe = recorded.recipe;
  recipe.wide_align = support.wide_align();
  auto built = op.build(recipe, row.winner.tokens);
  if (!built) return BucketOrNote(std::unexpect, built.error().message);
  if (std::string note = missing_support(*built, support); !note.empty()) return BucketOrNote(std::unexpect, std::move(note));
  const std::vector<op::RoleKernel> kernels = op::role_kernels(recipe);
  if (kernels.size() != recorded.kernels.size())
    return fail(Errc::internal, fmt::format("{} role kernels, {} names recorded", kernels.size(), recorded.kernels.size()), what);
  std::map<Role, std::string> files;
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const op::RoleKernel& k = kernels[i];
    if (k.symbol != recorded.kernels[i])
      return fail(Errc::database, fmt::format("the {} parameters name {}, the row says {}", to_string(k.launch), k.symbol,
                                              recorded.kernels[i]), what);
    if (launches(*built, k.symbol))  // not the one-launch layer's moe1 twin
      files[k.launch] = FT_TRY(stage_code_object(src.store, src.objects, src.target, src.toolchain_id, k.symbol, what));
  }
  return bucket_of(row, std::move(recipe), std::move(*built), support.code_object, files, src.runs);
}

}  // namespace ft::db
