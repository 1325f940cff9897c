#pragma once
// Generate + compile + analyse a target's variant space: the work `flytune
// compile` and `flytune search` (dry run or not) share.
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "generator/space.hpp"
#include "compile/analyze/analyze.hpp"
#include "compile/compile.hpp"

namespace ft {

struct CompiledVariant {
  Variant variant;
  KernelSource source;
  Result<CodeObject> object = fail(Errc::internal, "not compiled");
  std::optional<Resources> resources;   // set when compiled and analysed
  std::string analysis_error;           // why analysis failed, if it did
  // Why the tuner will not run it (spills, does not fit); empty when usable.
  std::string pruned_because;
  bool usable() const { return object.has_value() && pruned_because.empty(); }
};

struct CompiledSpace {
  const Target* target = nullptr;
  Backend backend = Backend::clang;
  KernelSource support_source;
  Result<CodeObject> support = fail(Errc::internal, "not compiled");
  std::vector<CompiledVariant> variants;
  std::size_t rejected_by_legality = 0;
  // Of `variants`, how many came from CompileSpaceOptions::extra (defaults the
  // space itself did not hold) rather than from the space.
  std::size_t extra_added = 0;
  // Where CompileSpaceOptions::select chose the variants: how many legal ones
  // the space held (0: the whole space was built).
  std::size_t selected_from = 0;
  // Interrupted (options.compile.stop): the sources not compiled are left out
  // of `variants` (not_started counts them); what did compile is kept.
  bool interrupted = false;
  std::size_t not_started = 0;
  std::size_t cache_hits = 0;  // code objects (support unit included) taken from the compile cache
};

struct CompileSpaceOptions {
  SpaceOptions space;
  CompileOptions compile;
  bool progress = true;
  // Extra variants to build besides the space (e.g. the default variant the
  // speedups are measured against); duplicates of space variants are skipped.
  std::vector<Variant> extra;
  // Which of the space's legal variants (in enumeration order) to build, e.g.
  // covering_sample (generator/space_sample.hpp: every axis value and value
  // pair in a few variants) or a named few; null: all of them. The extras are
  // added after it.
  std::function<std::vector<Variant>(std::span<const Variant> legal)> select;
};

// Errors only when nothing can be built (no toolchain for the target); per
// variant failures are in the results.
Result<CompiledSpace> compile_space(const Target& target, const Problem& problem, const CompileSpaceOptions& options);

}  // namespace ft
