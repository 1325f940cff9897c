#include "tuner/device/runtimes.hpp"

#include <charconv>
#include <string>

#include <fmt/format.h>

#include "tuner/device/cuda_device.hpp"
#include "tuner/device/hip_device.hpp"

namespace ft {
namespace {

std::string why_none(const RuntimeReport& r) {
  return r.detail.empty() ? fmt::format("{}: {}", r.runtime, r.problem)
                          : fmt::format("{}: {} ({})", r.runtime, r.problem, r.detail);
}

}  // namespace

std::vector<RuntimeReport> probe_runtimes() { return {probe_hip(), probe_cuda()}; }

std::string device_selector(const DeviceInfo& d) { return fmt::format("{}:{}", d.runtime, d.ordinal); }

Result<std::unique_ptr<Device>> open_device(std::string_view selector) {
  if (selector.empty()) {
    std::vector<RuntimeReport> reports = probe_runtimes();
    std::string reasons;
    for (const RuntimeReport& r : reports) {
      if (!r.devices.empty()) return open_device(device_selector(r.devices.front()));
      reasons += (reasons.empty() ? "" : "; ") + why_none(r);
    }
    return fail(Errc::no_device, fmt::format("no GPU found ({})", reasons));
  }
  std::string_view runtime = selector.substr(0, selector.find(':'));
  int ordinal = 0;
  if (runtime.size() < selector.size()) {
    std::string_view digits = selector.substr(runtime.size() + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || ordinal < 0)
      return fail(Errc::usage, fmt::format("bad device '{}': expected cuda:N or hip:N", selector));
  }
  if (runtime == "cuda") return open_cuda_device(ordinal);
  if (runtime == "hip") return open_hip_device(ordinal);
  return fail(Errc::usage, fmt::format("bad device '{}': expected cuda:N or hip:N", selector));
}

}  // namespace ft
