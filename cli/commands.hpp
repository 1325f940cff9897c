#pragma once
// Every subcommand registers itself here; each lives in its own cmd_*.cpp.
#include <vector>

#include "cli/command.hpp"

namespace ft::cli {

Command setup_targets(CLI::App& app);
Command setup_db(CLI::App& app);
Command setup_devices(CLI::App& app);
Command setup_compile(CLI::App& app);

inline std::vector<Command> register_commands(CLI::App& app) {
  return {
      setup_targets(app),
      setup_db(app),
      setup_devices(app),
      setup_compile(app),
  };
}

}  // namespace ft::cli
