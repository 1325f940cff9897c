#pragma once
// Every subcommand registers itself here; each lives in its own cmd_*.cpp.
#include <vector>

#include "cli/command.hpp"

namespace ft::cli {

Command setup_targets(CLI::App& app);
Command setup_db(CLI::App& app);
Command setup_report(CLI::App& app);
Command setup_generate(CLI::App& app);
Command setup_compile(CLI::App& app);
Command setup_search(CLI::App& app);
Command setup_worker(CLI::App& app);
Command setup_verify(CLI::App& app);
Command setup_devices(CLI::App& app);
Command setup_export(CLI::App& app);
Command setup_check_export(CLI::App& app);

inline std::vector<Command> register_commands(CLI::App& app) {
  return {
      setup_targets(app),
      setup_db(app),
      setup_report(app),
      setup_search(app),
      setup_generate(app),
      setup_compile(app),
      setup_verify(app),
      setup_worker(app),
      setup_devices(app),
      setup_export(app),
      setup_check_export(app),
  };
}

}  // namespace ft::cli
