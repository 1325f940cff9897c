// flytune targets: every known target, its limits, and which compiler backend
// can build for it on this machine (or exactly why none can).
#include <memory>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "generator/target.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft::cli {
namespace {

struct TargetsOptions {
  bool json = false;
};

int run_targets(const TargetsOptions& opt) {
  const Toolchains& tc = toolchains();
  nlohmann::json out = nlohmann::json::array();
  if (!opt.json)
    fmt::print("{:<8} {:<7} {:<6} {:>4} {:>14}  {:<15} {:<18} {}\n", "target", "vendor", "isa", "wave", "LDS KiB blk/CU",
               "matrix", "fp8", "backend on this machine");
  for (const Target& t : all_targets()) {
    auto backends = backends_for(t, tc);
    std::string backend_text;
    const ClangInfo* clang = t.is_amd() ? tc.clang_for(t.name) : nullptr;
    for (Backend b : backends) {
      backend_text += (backend_text.empty() ? "" : ", ") + std::string(to_string(b));
      if (b == Backend::clang) backend_text += " " + clang->version;  // which clang: 19 or a newer one
    }
    std::string reason;
    if (backends.empty()) reason = backend_for(t, tc).error().message;
    if (opt.json) {
      nlohmann::json row{{"target", t.name},
                         {"vendor", to_string(t.vendor)},
                         {"isa", to_string(t.isa)},
                         {"wave_size", t.wave_size},
                         {"lds_bytes", t.lds_bytes},
                         {"lds_per_cu", t.lds_per_cu},
                         {"lds_reserve_per_block", t.lds_reserve_per_block},
                         {"lds_without_opt_in", t.lds_without_opt_in},
                         {"max_block_threads", t.max_block_threads},
                         {"dry_run_default", t.dry_run_default},
                         {"matrix_families", t.family_list()},
                         {"fp8", to_string(t.fp8)},
                         {"backends", nlohmann::json::array()}};
      for (Backend b : backends) row["backends"].push_back(to_string(b));
      if (t.is_nvidia()) row["sm"] = t.sm;
      if (clang) row["clang"] = {{"version", clang->version}, {"executable", clang->executable}, {"root", clang->root}};
      if (!reason.empty()) row["unavailable_because"] = reason;
      out.push_back(row);
    } else {
      fmt::print("{:<8} {:<7} {:<6} {:>4} {:>14}  {:<15} {:<18} {}\n", t.name, to_string(t.vendor), to_string(t.isa),
                 t.wave_size, fmt::format("{}/{}", t.lds_bytes / 1024, t.lds_per_cu / 1024), t.families, to_string(t.fp8),
                 backends.empty() ? "none: " + reason : backend_text);
    }
  }
  if (opt.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  fmt::print("\ntoolchains:\n  comgr  {}\n  clang  {}\n",
             tc.comgr.found ? fmt::format("{}.{} ({}, {} ISAs)", tc.comgr.major, tc.comgr.minor, tc.comgr.library, tc.comgr.isas.size())
                            : "missing (" + tc.comgr.error + ")",
             tc.clang.describe());
  if (tc.newer_clang.found || !tc.newer_clang.error.empty())
    fmt::print("  clang  {}{}\n", tc.newer_clang.found ? "" : "newer: ", tc.newer_clang.describe());
  fmt::print("  NVRTC  {}\n", tc.nvrtc.found ? fmt::format("{}.{} ({})", tc.nvrtc.major, tc.nvrtc.minor, tc.nvrtc.library)
                                             : "missing (" + tc.nvrtc.error + ")");
  return 0;
}

}  // namespace

Command setup_targets(CLI::App& app) {
  auto opt = std::make_shared<TargetsOptions>();
  CLI::App* sub = app.add_subcommand("targets", "List known GPU targets and the compiler backend that builds each here");
  sub->add_flag("--json", opt->json, "Print JSON instead of a table");
  sub->footer("Examples:\n  flytune targets\n  flytune targets --json");
  return {sub, [opt] { return run_targets(*opt); }};
}

}  // namespace ft::cli
