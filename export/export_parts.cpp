#include "export/export_parts.hpp"

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
  return b;
}

}  // namespace ft::db
