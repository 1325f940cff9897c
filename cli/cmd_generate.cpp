// flytune generate: writes the instantiation sources of a target's legal
// variants (and the layer's support kernels) plus an index, without compiling.
#include <filesystem>
#include <fstream>
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "cli/problem_options.hpp"
#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "generator/target.hpp"

namespace ft::cli {
namespace {

struct GenerateOptions {
  std::string target;
  std::string out;
  std::string space = "default";
  bool show_rejected = false;
  ProblemOptions problem;
};

Status write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f || !(f << text)) return fail(Errc::io, "cannot write file", path.string());
  return {};
}

Status generate(const GenerateOptions& opt) {
  const Target* target = FT_TRY(parse_target_option(opt.target));
  Problem problem = FT_TRY(resolve_problem(opt.problem));
  SpaceOptions space_opt = FT_TRY(parse_space_option(opt.space));
  Space space = enumerate_space(*target, problem, space_opt);

  std::error_code ec;
  std::filesystem::create_directories(opt.out, ec);
  if (ec) return fail(Errc::io, fmt::format("cannot create the output folder: {}", ec.message()), opt.out);

  nlohmann::json index{{"target", target->name}, {"problem", problem.key()}, {"variants", nlohmann::json::array()}};
  KernelSource support = emit_support(*target, problem.dtype);
  FT_CHECK(write_file(std::filesystem::path(opt.out) / (support.name + ".cpp"), support.text));
  index["support"] = {{"name", support.name}, {"file", support.name + ".cpp"}, {"entry_points", support.entry_points}};
  for (const Variant& v : space.legal) {
    KernelSource src = emit_variant(v);
    FT_CHECK(write_file(std::filesystem::path(opt.out) / (src.name + ".cpp"), src.text));
    index["variants"].push_back({{"name", src.name},
                                 {"file", src.name + ".cpp"},
                                 {"threads", v.threads()},
                                 {"lds_bytes", v.lds_bytes()},
                                 {"params", v.to_json()}});
  }
  FT_CHECK(write_file(std::filesystem::path(opt.out) / "index.json", index.dump(2) + "\n"));
  fmt::print("generated {} variants for {} ({}), {} rejected by legality; sources and index.json in {}\n",
             space.legal.size(), target->name, problem.key(), space.rejected.size(), opt.out);
  if (opt.show_rejected)
    for (const Rejection& r : space.rejected) fmt::print("  rejected {}: {}\n", r.variant.name(), r.reason);
  if (space.legal.empty())
    fmt::print(stderr, "flytune: warning: --space '{}' holds no legal variant for {}{}; 'search' then builds only the "
                       "target's default variants\n",
               escape_control(opt.space, false), target->name, opt.show_rejected ? "" : " (--show-rejected says why)");
  return {};
}

}  // namespace

Command setup_generate(CLI::App& app) {
  auto opt = std::make_shared<GenerateOptions>();
  CLI::App* sub = app.add_subcommand("generate", "Write the instantiation sources of a target's legal variants");
  sub->add_option("--target", opt->target, fmt::format("Target: {}", known_target_names(" or ")))->required();
  sub->add_option("--out", opt->out, "Output folder")->required();
  sub->add_option("--space", opt->space, "Variant space: default, wide, small, and/or axis=values;...")->capture_default_str();
  sub->add_flag("--show-rejected", opt->show_rejected, "List every rejected variant with its reason");
  add_problem_options(sub, opt->problem);
  sub->footer(
      "Examples:\n"
      "  flytune generate --target gfx942 --out gen/gfx942\n"
      "  flytune generate --target sm_90a --out gen/h200 --space \"tile_m=64;warps=2x2\" --show-rejected");
  return {sub, [opt] {
            auto st = generate(*opt);
            return st ? kExitOk : report_error(st.error());
          }};
}

}  // namespace ft::cli
