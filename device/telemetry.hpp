#pragma once
// Clocks, temperature and power of a GPU where the vendor's management library
// can read them: NVML (dlopen libnvidia-ml.so.1) for NVIDIA, ROCm SMI (dlopen
// librocm_smi64.so) for AMD. The tuner records a reading with each measurement,
// so a slow result can be told apart from a throttled GPU. Nothing here fails:
// what cannot be read is std::nullopt, and `problem()` says why.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "device/device.hpp"

namespace ft {

struct TelemetryReading {
  std::optional<int> sm_clock_mhz;      // current SM / shader clock
  std::optional<int> memory_clock_mhz;  // current memory clock
  std::optional<double> temperature_c;  // GPU (edge, else junction) temperature
  std::optional<double> power_w;        // board / socket power draw
};

class Telemetry {
 public:
  // For the GPU that `device` describes: matched by PCI bus id when it has
  // one, otherwise by ordinal (which may not match the management library's
  // numbering when devices are hidden). runtime is "cuda" or "hip".
  static Telemetry open(const DeviceInfo& device);
  static Telemetry open(std::string_view runtime, std::string_view pci_bus_id, int ordinal);

  TelemetryReading read() const;
  bool available() const { return source_ != nullptr; }
  const std::string& problem() const { return problem_; }  // why nothing can be read
  std::string library() const;                              // which library reads it

  struct Source;  // a management library bound to one GPU

 private:
  std::shared_ptr<const Source> source_;
  std::string problem_;
};

// NVML's driver version ("580.95.05"), when NVML is present.
std::optional<std::string> nvidia_driver_version();

// PCI bus id text ("0000:3b:00.0", case-insensitive) -> ROCm SMI's BDF id
// (domain << 32 | bus << 8 | device << 3 | function); nullopt when malformed.
std::optional<std::uint64_t> pci_bdf_id(std::string_view pci_bus_id);

// ROCm SMI's rsmi_frequencies_t gained a leading `bool has_deep_sleep` and a
// 33rd entry in ROCm 6; decode the current frequency (MHz) from either layout,
// picked by the library's major version. nullopt when the record is not sane.
std::optional<int> rsmi_current_frequency_mhz(std::span<const std::byte> record, int rsmi_major);

}  // namespace ft
