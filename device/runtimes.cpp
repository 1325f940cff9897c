#include "device/runtimes.hpp"

#include <charconv>
#include <string>

#include <fmt/format.h>

#include "device/cuda_device.hpp"
#include "device/hip_device.hpp"

namespace ft {
namespace {

std::string why_none(const RuntimeReport& r) {
  return r.detail.empty() ? fmt::format("{}: {}", r.runtime, r.problem)
                          : fmt::format("{}: {} ({})", r.runtime, r.problem, r.detail);
}

}  // namespace

std::vector<RuntimeReport> probe_runtimes() { return {probe_hip(), probe_cuda()}; }

std::string device_selector(const DeviceInfo& d) { return fmt::format("{}:{}", d.runtime, d.ordinal); }

namespace {

struct GpuSelector {
  std::string_view runtime;
  int ordinal = 0;
};

// "cuda:N", "hip:N", "cuda" or "hip" (ordinal 0); not "".
Result<GpuSelector> parse_gpu_selector(std::string_view selector) {
  GpuSelector s;
  s.runtime = selector.substr(0, selector.find(':'));
  if (s.runtime.size() < selector.size()) {
    std::string_view digits = selector.substr(s.runtime.size() + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), s.ordinal);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || s.ordinal < 0)
      return fail(Errc::usage, fmt::format("bad device '{}': expected cuda:N or hip:N", selector));
  }
  if (s.runtime != "cuda" && s.runtime != "hip")
    return fail(Errc::usage, fmt::format("bad device '{}': expected cuda:N or hip:N", selector));
  return s;
}

}  // namespace

Status check_device_selector(std::string_view selector) {
  if (selector.empty()) return {};
  if (auto s = parse_gpu_selector(selector); !s) return std::unexpected(s.error());
  return {};
}

Result<std::unique_ptr<Device>> open_device(std::string_view selector, std::string_view prefer_arch) {
  if (selector.empty()) {
    std::vector<RuntimeReport> reports = probe_runtimes();
    if (!prefer_arch.empty())
      for (const RuntimeReport& r : reports)
        for (const DeviceInfo& d : r.devices)
          if (d.arch == prefer_arch) return open_device(device_selector(d));
    std::string reasons;
    for (const RuntimeReport& r : reports) {
      if (!r.devices.empty()) return open_device(device_selector(r.devices.front()));
      reasons += (reasons.empty() ? "" : "; ") + why_none(r);
    }
    return fail(Errc::no_device, fmt::format("no GPU found ({})", reasons));
  }
  const GpuSelector s = FT_TRY(parse_gpu_selector(selector));
  if (s.runtime == "cuda") return open_cuda_device(s.ordinal);
  return open_hip_device(s.ordinal);
}

}  // namespace ft
