// flytune worker: the measuring subprocess `flytune search` starts (one per
// device) so a kernel that faults or hangs cannot take the search down. Speaks
// JSON lines on stdin/stdout (measure/worker/worker_service.hpp). Not for people.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/diag.hpp"
#include "measure/worker/worker_device.hpp"
#include "measure/worker/worker_service.hpp"

namespace ft::cli {

Command setup_worker(CLI::App& app) {
  auto device = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("worker", "Measuring subprocess of flytune search (JSON lines on stdin/stdout)");
  sub->group("");  // hidden from --help: started by search, not by people
  sub->add_option("--device", *device,
                  "cuda:N, hip:N, emu:<target> or emu:<target>:<n> (the CPU emulator), or empty for the first GPU");
  return {sub, [device] {
            // A malformed selector is one usage line now, not an error answer later.
            if (auto ok = check_worker_selector(*device); !ok) return report_error(as_usage(ok.error(), "--device"));
            return serve_worker(*device, std::cin, std::cout);
          }};
}

}  // namespace ft::cli
