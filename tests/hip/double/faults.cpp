#include "tests/hip/double/faults.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <thread>

#include <fmt/format.h>

namespace ft::hip_double {
namespace {

struct FaultPlan {
  std::string what;    // "hang", "abort", or empty: none
  long nth = 0;        // the Nth matching launch, from 1
  std::string kernel;  // matching kernels' names contain this
};

FaultPlan fault_plan() {
  FaultPlan p;
  const char* env = std::getenv("FLYTUNE_HIP_DOUBLE_FAULT");
  if (!env || !*env) return p;
  const std::string_view text(env);
  const auto at = text.find('@');
  const auto colon = text.find(':', at == std::string_view::npos ? 0 : at);
  const std::string what(text.substr(0, at));
  const long nth = at == std::string_view::npos ? 0 : std::atol(std::string(text.substr(at + 1, colon - at - 1)).c_str());
  if ((what != "hang" && what != "abort") || nth < 1) {
    // A test that asks for a fault the double cannot read must not pass unfaulted.
    std::fprintf(stderr, "flytune HIP double: FLYTUNE_HIP_DOUBLE_FAULT='%s' is not <hang|abort>@<N>[:<kernel>]\n", env);
    std::_Exit(2);
  }
  p.what = what;
  p.nth = nth;
  if (colon != std::string_view::npos) p.kernel = std::string(text.substr(colon + 1));
  return p;
}

// Whether this process may fault: the marker did not exist and is now made.
bool claim_marker(const std::string& kernel) {
  const char* marker = std::getenv("FLYTUNE_HIP_DOUBLE_FAULT_MARKER");
  if (!marker || !*marker) return true;
  const int fd = ::open(marker, O_WRONLY | O_CREAT | O_EXCL, 0644);
  if (fd < 0) return false;
  const std::string line = fmt::format("{} {}\n", ::getpid(), kernel);
  const bool written = ::write(fd, line.data(), line.size()) == ssize_t(line.size());
  ::close(fd);
  return written;
}

}  // namespace

void before_launch(const std::string& kernel) {
  static const FaultPlan plan = fault_plan();
  static std::atomic<long> matching{0};
  if (plan.what.empty() || kernel.find(plan.kernel) == std::string::npos) return;
  if (++matching != plan.nth || !claim_marker(kernel)) return;
  if (plan.what == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
  std::fprintf(stderr, "Memory access fault by GPU node-1 (the flytune HIP double, FLYTUNE_HIP_DOUBLE_FAULT) in %s\n",
               kernel.c_str());
  const rlimit no_core{0, 0};
  ::setrlimit(RLIMIT_CORE, &no_core);
  ::signal(SIGABRT, SIG_DFL);
  ::raise(SIGABRT);
}

float reported_elapsed_ms(float measured) {
  const char* env = std::getenv("FLYTUNE_HIP_DOUBLE_EVENTS");
  const std::string_view mode(env ? env : "");
  if (mode == "negative") return -measured;
  if (mode == "nan") return std::nanf("");
  return measured;
}

}  // namespace ft::hip_double
