#include "cli/app.hpp"

#include <exception>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "generator/problem.hpp"
#include "generator/version.hpp"

namespace ft::cli {

int run_app(int argc, char** argv) {
  try {
    CLI::App app{"flytune: tunes Mixture-of-Experts routed-GEMM kernels for AMD Instinct and NVIDIA Hopper GPUs",
                 "flytune"};
    app.set_version_flag("--version", fmt::format("flytune {} (commit {}, templates {})", FLYTUNE_VERSION,
                                                  FLYTUNE_GIT_COMMIT, FLYTUNE_TEMPLATES_COMMIT));
    app.require_subcommand(1);
    app.fallthrough(false);

    std::vector<Command> commands = register_commands(app);
    app.footer(
        "Examples:\n"
        "  flytune targets\n"
        "  flytune search                      # tune Mixtral 8x7B on this GPU (a dry run without one)\n"
        "  flytune db winners\n"
        "  flytune <command> --help            # a command's options and examples");
    // CLI11 reports a stray first word or option as "a subcommand is required";
    // name it and list the commands instead.
    if (argc > 1) {
      const std::string first = argv[1];
      bool known = false;
      for (const Command& c : commands) known = known || c.app->check_name(first);
      const bool top_flag = first == "-h" || first == "--help" || first == "--version";
      if (!known && !top_flag) {
        std::string names;
        for (const Command& c : commands)
          if (!c.app->get_group().empty()) names += (names.empty() ? "" : ", ") + c.app->get_name();
        fmt::print(stderr, "flytune: error: unknown {} '{}'; flytune takes a command first: {}\n"
                           "Usage: flytune <command> [options]; see 'flytune --help'\n",
                   first.starts_with("-") ? "option" : "command", escape_control(shorten(first), false), names);
        return kExitUsage;
      }
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      fmt::print(stderr, "flytune: error: {}\nUsage: flytune <command> [options]; see 'flytune --help'\n",
                 escape_control(e.what(), false));
      return kExitUsage;
    }
    for (const Command& c : commands)
      if (c.app->parsed()) return c.run();
    fmt::print(stderr, "flytune: error: no command given; see 'flytune --help'\n");
    return kExitUsage;
  } catch (const std::exception& e) {
    // Libraries do not throw; this guards the CLI layer and third-party code.
    return report_error(Error{Errc::internal, fmt::format("unexpected failure: {}", e.what()), {}});
  } catch (...) {
    return report_error(Error{Errc::internal, "unexpected failure", {}});
  }
}

}  // namespace ft::cli
