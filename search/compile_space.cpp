#include "search/compile_space.hpp"

#include <set>

#include <fmt/format.h>

#include "generator/emitter.hpp"
#include "search/progress.hpp"

namespace ft {

Result<CompiledSpace> compile_space(const Target& target, const Problem& problem, const CompileSpaceOptions& opt) {
  CompiledSpace out;
  out.target = &target;
  out.backend = FT_TRY(choose_backend(target, opt.compile));
  Space space = enumerate_space(target, problem, opt.space);
  out.rejected_by_legality = space.rejected.size();
  if (opt.select) {
    out.selected_from = space.legal.size();
    space.legal = opt.select(space.legal);
  }
  std::set<std::string> names;
  for (const Variant& v : space.legal) names.insert(v.name());
  for (const Variant& v : opt.extra)
    if (names.insert(v.name()).second && !why_illegal(v, problem)) {
      space.legal.push_back(v);
      ++out.extra_added;
    }

  std::vector<KernelSource> sources;
  sources.push_back(emit_support(target, problem.dtype));
  for (const Variant& v : space.legal) sources.push_back(emit_variant(v));

  Progress bar(fmt::format("compile {}", target.name), sources.size(), opt.progress);
  auto results = compile_all(sources, target, opt.compile,
                             [&](std::size_t, std::size_t, const std::string& name) { bar.advance(name); });
  bar.finish();

  auto not_started = [](const Result<CodeObject>& r) { return !r && r.error().code == Errc::interrupted; };
  for (const auto& r : results) {
    out.interrupted = out.interrupted || not_started(r);
    out.cache_hits += r && r->from_cache ? 1 : 0;
  }
  out.support_source = sources.front();
  out.support = std::move(results.front());
  for (std::size_t i = 0; i < space.legal.size(); ++i) {
    if (not_started(results[i + 1])) {  // Ctrl-C: never compiled, not a failure
      ++out.not_started;
      continue;
    }
    CompiledVariant cv{space.legal[i], sources[i + 1], std::move(results[i + 1]), std::nullopt, {}, {}};
    if (cv.object) {
      auto r = analyze(*cv.object, target, cv.variant.name(), cv.variant.threads(), cv.variant.lds_bytes());
      if (r) {
        cv.resources = *r;
        if (r->spills) cv.pruned_because = fmt::format("spills ({} bytes of scratch/spill)", std::max(r->spill_bytes, r->scratch_bytes));
        else if (r->occupancy == 0) cv.pruned_because = "does not fit on the target (occupancy 0)";
        else if (r->serialized_mma) cv.pruned_because = "ptxas serialised its wgmma (a performance warning; see the notes)";
      } else {
        cv.analysis_error = r.error().describe();
      }
    }
    out.variants.push_back(std::move(cv));
  }
  return out;
}

}  // namespace ft
