// flytune worker: the measuring subprocess `flytune search` starts (one per
// GPU) so a kernel that faults or hangs cannot take the search down. Speaks
// JSON lines on stdin/stdout (tuner/worker/worker_service.hpp). Not for people.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "tuner/worker/worker_service.hpp"

namespace ft::cli {

Command setup_worker(CLI::App& app) {
  auto device = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("worker", "Measuring subprocess of flytune search (JSON lines on stdin/stdout)");
  sub->group("");  // hidden from --help: started by search, not by people
  sub->add_option("--device", *device, "GPU selector: cuda:N, hip:N, or empty for the first GPU");
  return {sub, [device] { return serve_worker(*device, std::cin, std::cout); }};
}

}  // namespace ft::cli
