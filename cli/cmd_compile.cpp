// flytune compile: generate, compile and analyse a target's variant space;
// writes one code object per variant (plus the layer's support unit) and an
// index.json describing each, then prints a table and a summary.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "cli/option_checks.hpp"
#include "cli/problem_options.hpp"
#include "generator/space_sample.hpp"
#include "generator/target.hpp"
#include "search/compile_space.hpp"
#include "search/progress.hpp"

namespace ft::cli {
namespace {

struct CompileCommandOptions {
  std::string target;
  std::string out;
  std::string space = "default";
  std::string cache_dir;
  unsigned jobs = 0;
  bool json = false;
  bool covering_sample = false;
  ProblemOptions problem;
};

Status write_binary(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  if (!f) return fail(Errc::io, "cannot write file", path.string());
  return {};
}

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f || !(f << text)) return fail(Errc::io, "cannot write file", path.string());
  return {};
}

nlohmann::json resources_json(const Resources& r) {
  return {{"vgprs", r.vgprs},
          {"agprs", r.agprs},
          {"sgprs", r.sgprs},
          {"regs", r.regs},
          {"lds_bytes", r.lds_bytes},
          {"scratch_bytes", r.scratch_bytes},
          {"spill_bytes", r.spill_bytes},
          {"spills", r.spills},
          {"occupancy", r.occupancy},
          {"matrix_ops", r.matrix_ops},
          {"instructions", r.instructions},
          {"notes", r.notes}};
}

int matrix_op_count(const Resources& r) {
  int n = 0;
  for (const auto& [mnemonic, count] : r.matrix_ops) n += count;
  return n;
}

// What happened to one variant, in the index's words.
struct VariantOutcome {
  std::string status;  // ok | compile_error | analysis_error | pruned
  std::string why;
};

VariantOutcome outcome_of(const CompiledVariant& cv) {
  if (!cv.object) return {"compile_error", cv.object.error().message};
  if (!cv.analysis_error.empty()) return {"analysis_error", cv.analysis_error};
  if (!cv.pruned_because.empty()) return {"pruned", cv.pruned_because};
  return {"ok", ""};
}

// The first line of a (possibly long) compiler message, for the table.
std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

struct Totals {
  int compiled = 0, failed = 0, analysis_failed = 0, pruned = 0, cache_hits = 0, objects = 0;
  double compile_seconds = 0;
};

void print_table(const CompiledSpace& cs, const Target& target) {
  bool amd = target.is_amd();
  std::size_t width = 6;
  for (const auto& cv : cs.variants) width = std::max(width, cv.variant.name().size());
  if (amd)
    fmt::print("{:<{}} {:>5} {:>5} {:>5} {:>7} {:>7} {:>4} {:>6} {:>8} {:>5}  {}\n", "kernel", width, "VGPR", "AGPR",
               "SGPR", "LDS", "scratch", "occ", "MFMA", "compile", "cache", "status");
  else
    fmt::print("{:<{}} {:>5} {:>7} {:>7} {:>4} {:>6} {:>8} {:>5}  {}\n", "kernel", width, "regs", "smem", "stack",
               "occ", "MMA", "compile", "cache", "status");
  for (const auto& cv : cs.variants) {
    VariantOutcome o = outcome_of(cv);
    std::string status = o.status == "ok" ? "ok" : fmt::format("{}: {}", o.status, first_line(o.why));
    std::string name = cv.variant.name();
    if (!cv.object) {
      fmt::print("{:<{}} {}\n", name, width, status);
      continue;
    }
    std::string secs = fmt::format("{:.2f}s", cv.object->compile_seconds);
    std::string cache = cv.object->from_cache ? "hit" : "-";
    if (!cv.resources) {
      fmt::print("{:<{}} {:>{}} {:>8} {:>5}  {}\n", name, width, "", amd ? 41 : 29, secs, cache, status);
      continue;
    }
    const Resources& r = *cv.resources;
    if (amd)
      fmt::print("{:<{}} {:>5} {:>5} {:>5} {:>7} {:>7} {:>4} {:>6} {:>8} {:>5}  {}\n", name, width, r.vgprs, r.agprs,
                 r.sgprs, r.lds_bytes, r.scratch_bytes, r.occupancy, matrix_op_count(r), secs, cache, status);
    else
      fmt::print("{:<{}} {:>5} {:>7} {:>7} {:>4} {:>6} {:>8} {:>5}  {}\n", name, width, r.regs, r.lds_bytes,
                 r.scratch_bytes, r.occupancy, matrix_op_count(r), secs, cache, status);
  }
}

// One variant's row of index.json (its code object written to `out`), counted into `totals`.
Result<nlohmann::json> variant_row(const CompiledVariant& cv, const std::filesystem::path& out, const std::string& ext,
                                   nlohmann::json& index, Totals& totals) {
  VariantOutcome o = outcome_of(cv);
  std::string name = cv.variant.name();
  nlohmann::json row{{"name", name},
                     {"params", cv.variant.to_json()},
                     {"threads", cv.variant.threads()},
                     {"lds_bytes", cv.variant.lds_bytes()},
                     {"status", o.status}};
  if (!o.why.empty()) row["why"] = o.why;
  if (cv.object) {
    std::string file = name + ext;
    FT_CHECK(write_binary(out / file, cv.object->binary));
    row.update({{"file", file},
                {"hash", cv.object->hash},
                {"compile_seconds", cv.object->compile_seconds},
                {"from_cache", cv.object->from_cache}});
    if (index["toolchain"] == "") index["toolchain"] = cv.object->toolchain_version;
    ++totals.compiled;
    ++totals.objects;
    totals.compile_seconds += cv.object->compile_seconds;
    totals.cache_hits += cv.object->from_cache ? 1 : 0;
  } else {
    ++totals.failed;
  }
  if (cv.resources) row["resources"] = resources_json(*cv.resources);
  if (o.status == "analysis_error") ++totals.analysis_failed;
  if (o.status == "pruned") ++totals.pruned;
  return row;
}

Result<int> compile_command(const CompileCommandOptions& opt) {
  const Target* target = FT_TRY(parse_target_option(opt.target));
  Problem problem = FT_TRY(resolve_problem(opt.problem));
  CompileSpaceOptions cso;
  cso.space = FT_TRY(parse_space_option(opt.space));
  cso.compile.cache_dir = opt.cache_dir;
  // An unusable cache folder: an error when named with --cache-dir, a warning
  // when it is the default (the compile still works, only slower next time).
  if (auto cache = check_cache_dir(opt.cache_dir); !cache) {
    if (!opt.cache_dir.empty()) return std::unexpected(with_context(cache.error(), "--cache-dir"));
    fmt::print(stderr, "flytune: warning: {}; compiling without the cache (set FLYTUNE_CACHE_DIR to a writable folder, "
                       "or to 'none')\n", escape_control(cache.error().describe(), false));
  }
  cso.compile.jobs = opt.jobs;
  cso.progress = !opt.json;
  if (opt.covering_sample) cso.select = covering_sample;
  // Say why nothing can be built before creating folders or emitting anything.
  Backend backend = FT_TRY(choose_backend(*target, cso.compile));

  std::filesystem::path out(opt.out);
  std::error_code ec;
  std::filesystem::create_directories(out, ec);
  if (ec) return fail(Errc::io, fmt::format("cannot create the output folder: {}", ec.message()), opt.out);

  auto wall_start = std::chrono::steady_clock::now();
  CompiledSpace cs = FT_TRY(compile_space(*target, problem, cso));
  double wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  std::string ext(code_object_extension(backend));

  Totals totals;
  nlohmann::json index{{"target", target->name},
                       {"problem", problem.key()},
                       {"space", opt.space},
                       {"covering_sample", opt.covering_sample},
                       {"backend", to_string(backend)},
                       {"toolchain", ""},
                       {"variants", nlohmann::json::array()}};

  nlohmann::json support{{"name", cs.support_source.name}, {"entry_points", cs.support_source.entry_points}};
  if (cs.support) {
    std::string file = cs.support_source.name + ext;
    FT_CHECK(write_binary(out / file, cs.support->binary));
    support.update({{"file", file},
                    {"hash", cs.support->hash},
                    {"compile_seconds", cs.support->compile_seconds},
                    {"from_cache", cs.support->from_cache},
                    {"status", "ok"}});
    index["toolchain"] = cs.support->toolchain_version;
    totals.compile_seconds += cs.support->compile_seconds;
    totals.cache_hits += cs.support->from_cache ? 1 : 0;
    ++totals.objects;
  } else {
    support.update({{"status", "compile_error"}, {"why", cs.support.error().describe()}});
  }
  index["support"] = support;

  for (const CompiledVariant& cv : cs.variants) index["variants"].push_back(FT_TRY(variant_row(cv, out, ext, index, totals)));
  index["summary"] = {{"legal", cs.variants.size()},
                      {"rejected_by_legality", cs.rejected_by_legality},
                      {"sampled_from", cs.selected_from},
                      {"compiled", totals.compiled},
                      {"failed", totals.failed},
                      {"analysis_failed", totals.analysis_failed},
                      {"pruned", totals.pruned},
                      {"cache_hits", totals.cache_hits},
                      {"code_objects", totals.objects},
                      {"compile_seconds", totals.compile_seconds},
                      {"wall_seconds", wall_seconds}};
  FT_CHECK(write_text(out / "index.json", index.dump(2) + "\n"));

  if (opt.json) {
    fmt::print("{}\n", index.dump(2));
  } else {
    print_table(cs, *target);
    fmt::print(
        "\n{}: {}{} compiled, {} failed, {} pruned (spills, no fit or serialised wgmma){}; {} rejected by legality; compile time {} "
        "summed ({} wall, {} jobs); cache hits {}/{}; code objects and index.json in {}\n",
        target->name, cs.selected_from ? fmt::format("a covering sample of {} of the {} legal variants; ", cs.variants.size(),
                                                     cs.selected_from)
                                       : "",
        totals.compiled, totals.failed, totals.pruned,
        totals.analysis_failed ? fmt::format(", {} not analysed", totals.analysis_failed) : "",
        cs.rejected_by_legality, format_duration(totals.compile_seconds), format_duration(wall_seconds),
        opt.jobs ? fmt::format("{}", opt.jobs) : "all", totals.cache_hits, totals.objects,
        opt.out);
  }
  if (cs.variants.empty())
    fmt::print(stderr, "flytune: warning: --space '{}' holds no legal variant for {}; 'flytune generate --show-rejected' "
                       "says why\n",
               escape_control(opt.space, false), target->name);
  // Compiler or analysis failures are errors (the objects that did build are written).
  if (!cs.support) return report_error(with_context(cs.support.error(), "support unit"));
  if (totals.failed || totals.analysis_failed)
    return report_error(Error{Errc::compile,
                              fmt::format("{} of {} variants failed to compile and {} could not be analysed; see {}",
                                          totals.failed, cs.variants.size(), totals.analysis_failed,
                                          (out / "index.json").string()),
                              std::string(target->name)});
  return kExitOk;
}

}  // namespace

Command setup_compile(CLI::App& app) {
  auto opt = std::make_shared<CompileCommandOptions>();
  CLI::App* sub = app.add_subcommand("compile", "Compile and analyse a target's variants into code objects + index.json");
  sub->add_option("--target", opt->target, fmt::format("Target: {}", known_target_names(" or ")))->required();
  sub->add_option("--out", opt->out, "Output folder")->required();
  sub->add_option("--space", opt->space, "Variant space: default, wide, small, and/or axis=values;...")->capture_default_str();
  sub->add_option("--jobs", opt->jobs, "Parallel compiles (default: all cores)")->check(whole_number_at_least(0));
  sub->add_option("--cache-dir", opt->cache_dir,
                  "Code-object cache folder ('none' disables; default $FLYTUNE_CACHE_DIR or ~/.cache/flytune)");
  sub->add_flag("--json", opt->json, "Print index.json instead of the table");
  sub->add_flag("--covering-sample", opt->covering_sample,
                "Compile only a covering sample of the space: a few legal variants holding every value of every axis and "
                "every pair of two axes' values (the compile tests' sample)");
  add_problem_options(sub, opt->problem);
  sub->footer(
      "Examples:\n"
      "  flytune compile --target gfx942 --out out/gfx942\n"
      "  flytune compile --target sm_90a --out out/h200 --space small --jobs 4 --json\n"
      "  flytune compile --target gfx950 --out out/gfx950 --cache-dir none\n"
      "  flytune compile --target sm_90a --out out/sm_90a-sample --covering-sample");
  return {sub, [opt] {
            auto r = compile_command(*opt);
            return r ? *r : report_error(r.error());
          }};
}

}  // namespace ft::cli
