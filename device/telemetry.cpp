#include "device/telemetry.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "system/dynlib.hpp"

namespace ft {
namespace {

// --- NVML (no header on the build machine; these are its documented C types) ---

using nvmlReturn = int;
using nvmlDevice = void*;
constexpr nvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2;  // nvmlClockType_t
constexpr int kNvmlTemperatureGpu = 0;              // nvmlTemperatureSensors_t

struct NvmlApi {
  DynLib lib;
  nvmlReturn (*init)() = nullptr;
  nvmlReturn (*handle_by_pci)(const char*, nvmlDevice*) = nullptr;
  nvmlReturn (*handle_by_index)(unsigned, nvmlDevice*) = nullptr;
  nvmlReturn (*clock_info)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*temperature)(nvmlDevice, int, unsigned*) = nullptr;
  nvmlReturn (*power_usage)(nvmlDevice, unsigned*) = nullptr;
  nvmlReturn (*driver_version)(char*, unsigned) = nullptr;
  const char* (*error_string)(nvmlReturn) = nullptr;
};

// NVML is initialised once per process and stays loaded (readings are taken
// around every measurement; nvmlInit is far too slow to repeat).
Result<std::shared_ptr<const NvmlApi>> nvml() {
  static std::mutex mu;
  static std::shared_ptr<const NvmlApi> api;
  static std::string last_error;
  std::lock_guard lock(mu);
  if (api) return api;
  if (!last_error.empty()) return fail(Errc::not_found, last_error);
  auto fail_with = [&](std::string message) -> Result<std::shared_ptr<const NvmlApi>> {
    last_error = std::move(message);
    return fail(Errc::not_found, last_error);
  };
  auto lib = DynLib::open({"libnvidia-ml.so.1", "/usr/local/nvidia/lib64/libnvidia-ml.so.1"}, "NVML");
  if (!lib) return fail_with("libnvidia-ml.so.1 not found (no NVIDIA driver)");
  auto a = std::make_shared<NvmlApi>();
  a->lib = std::move(*lib);
  if (!a->lib.bind(a->init, "nvmlInit_v2") || !a->lib.bind(a->handle_by_pci, "nvmlDeviceGetHandleByPciBusId_v2") ||
      !a->lib.bind(a->handle_by_index, "nvmlDeviceGetHandleByIndex_v2") ||
      !a->lib.bind(a->clock_info, "nvmlDeviceGetClockInfo") || !a->lib.bind(a->temperature, "nvmlDeviceGetTemperature") ||
      !a->lib.bind(a->power_usage, "nvmlDeviceGetPowerUsage") ||
      !a->lib.bind(a->driver_version, "nvmlSystemGetDriverVersion") || !a->lib.bind(a->error_string, "nvmlErrorString"))
    return fail_with(fmt::format("{} lacks the NVML functions flytune reads", a->lib.path()));
  if (nvmlReturn r = a->init(); r != kNvmlSuccess)
    return fail_with(fmt::format("nvmlInit failed: {}", a->error_string(r)));
  api = std::move(a);
  return api;
}

// --- ROCm SMI ---

using rsmiStatus = int;
constexpr rsmiStatus kRsmiSuccess = 0;
constexpr int kRsmiClkSys = 0, kRsmiClkMem = 4;         // rsmi_clk_type_t
constexpr unsigned kRsmiTempEdge = 0, kRsmiTempJunction = 1;  // rsmi_temperature_type_t
constexpr int kRsmiTempCurrent = 0;                      // rsmi_temperature_metric_t

struct RsmiVersion {
  std::uint32_t major, minor, patch;
  const char* build;
};

struct RsmiApi {
  DynLib lib;
  int major = 0;
  rsmiStatus (*init)(std::uint64_t) = nullptr;
  rsmiStatus (*version)(RsmiVersion*) = nullptr;
  rsmiStatus (*num_devices)(std::uint32_t*) = nullptr;
  rsmiStatus (*pci_id)(std::uint32_t, std::uint64_t*) = nullptr;
  rsmiStatus (*clock)(std::uint32_t, int, void*) = nullptr;
  rsmiStatus (*temperature)(std::uint32_t, std::uint32_t, int, std::int64_t*) = nullptr;
  rsmiStatus (*power_average)(std::uint32_t, std::uint32_t, std::uint64_t*) = nullptr;
  rsmiStatus (*socket_power)(std::uint32_t, std::uint64_t*) = nullptr;  // ROCm 6 only
};

Result<std::shared_ptr<const RsmiApi>> rsmi() {
  static std::mutex mu;
  static std::shared_ptr<const RsmiApi> api;
  static std::string last_error;
  std::lock_guard lock(mu);
  if (api) return api;
  if (!last_error.empty()) return fail(Errc::not_found, last_error);
  auto fail_with = [&](std::string message) -> Result<std::shared_ptr<const RsmiApi>> {
    last_error = std::move(message);
    return fail(Errc::not_found, last_error);
  };
  auto lib = DynLib::open({"librocm_smi64.so.7", "librocm_smi64.so.6", "librocm_smi64.so.5", "librocm_smi64.so",
                           "/opt/rocm/lib/librocm_smi64.so.7", "/opt/rocm/lib/librocm_smi64.so.6",
                           "/opt/rocm/lib/librocm_smi64.so.5"},
                          "ROCm SMI");
  if (!lib) return fail_with("librocm_smi64.so not found (no ROCm SMI)");
  auto a = std::make_shared<RsmiApi>();
  a->lib = std::move(*lib);
  if (!a->lib.bind(a->init, "rsmi_init") || !a->lib.bind(a->version, "rsmi_version_get") ||
      !a->lib.bind(a->num_devices, "rsmi_num_monitor_devices") || !a->lib.bind(a->pci_id, "rsmi_dev_pci_id_get") ||
      !a->lib.bind(a->clock, "rsmi_dev_gpu_clk_freq_get") || !a->lib.bind(a->temperature, "rsmi_dev_temp_metric_get"))
    return fail_with(fmt::format("{} lacks the ROCm SMI functions flytune reads", a->lib.path()));
  a->lib.bind(a->power_average, "rsmi_dev_power_ave_get");
  a->lib.bind(a->socket_power, "rsmi_dev_current_socket_power_get");
  if (rsmiStatus r = a->init(0); r != kRsmiSuccess) return fail_with(fmt::format("rsmi_init failed: status {}", r));
  RsmiVersion v{};
  if (a->version(&v) == kRsmiSuccess) a->major = int(v.major);
  api = std::move(a);
  return api;
}

template <class T>
T load_at(std::span<const std::byte> bytes, std::size_t offset) {
  T v{};
  std::memcpy(&v, bytes.data() + offset, sizeof(T));
  return v;
}

// One of the two rsmi_frequencies_t layouts: where its fields sit.
struct FrequencyLayout {
  std::size_t count_at, current_at, table_at, entries;
};
constexpr FrequencyLayout kRsmiFrequenciesV5{0, 4, 8, 32};    // 264 bytes
constexpr FrequencyLayout kRsmiFrequenciesV6{4, 8, 16, 33};   // bool first; 280 bytes
constexpr std::size_t kRsmiFrequenciesBytes = 16 + 33 * 8;

std::optional<int> decode_frequency(std::span<const std::byte> rec, FrequencyLayout l) {
  if (rec.size() < l.table_at + l.entries * 8) return std::nullopt;
  auto count = load_at<std::uint32_t>(rec, l.count_at);
  auto current = load_at<std::uint32_t>(rec, l.current_at);
  if (count == 0 || count > l.entries || current >= count) return std::nullopt;
  auto hz = load_at<std::uint64_t>(rec, l.table_at + current * 8);
  if (hz < 1'000'000 || hz > 100'000'000'000ull) return std::nullopt;  // 1 MHz .. 100 GHz
  return int(hz / 1'000'000);
}

}  // namespace

std::optional<int> rsmi_current_frequency_mhz(std::span<const std::byte> record, int rsmi_major) {
  // The version picks the layout; the other is a fallback for libraries whose
  // version number and layout disagree (the decode checks its own sanity).
  FrequencyLayout first = rsmi_major >= 6 ? kRsmiFrequenciesV6 : kRsmiFrequenciesV5;
  FrequencyLayout second = rsmi_major >= 6 ? kRsmiFrequenciesV5 : kRsmiFrequenciesV6;
  if (auto mhz = decode_frequency(record, first)) return mhz;
  return decode_frequency(record, second);
}

std::optional<std::uint64_t> pci_bdf_id(std::string_view id) {
  // "DDDD:BB:DD.F" (domain may be 4 or 8 hex digits; CUDA prints "00000000:3B:00.0" in places).
  auto hex = [](std::string_view s) -> std::optional<std::uint64_t> {
    std::uint64_t v = 0;
    if (s.empty()) return std::nullopt;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v, 16);
    if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
    return v;
  };
  auto c1 = id.find(':');
  auto c2 = id.find(':', c1 == std::string_view::npos ? c1 : c1 + 1);
  auto dot = id.rfind('.');
  if (c1 == std::string_view::npos || c2 == std::string_view::npos || dot == std::string_view::npos || dot < c2)
    return std::nullopt;
  auto domain = hex(id.substr(0, c1));
  auto bus = hex(id.substr(c1 + 1, c2 - c1 - 1));
  auto dev = hex(id.substr(c2 + 1, dot - c2 - 1));
  auto fn = hex(id.substr(dot + 1));
  if (!domain || !bus || !dev || !fn || *bus > 0xff || *dev > 0x1f || *fn > 0x7) return std::nullopt;
  return (*domain << 32) | (*bus << 8) | (*dev << 3) | *fn;
}

struct Telemetry::Source {
  std::shared_ptr<const NvmlApi> nvml;
  nvmlDevice nvml_device = nullptr;
  std::shared_ptr<const RsmiApi> rsmi;
  std::uint32_t rsmi_index = 0;
};

Telemetry Telemetry::open(const DeviceInfo& device) {
  return open(device.runtime, device.pci_bus_id, device.ordinal);
}

Telemetry Telemetry::open(std::string_view runtime, std::string_view pci_bus_id, int ordinal) {
  Telemetry t;
  auto source = std::make_shared<Source>();
  if (runtime == "cuda") {
    auto api = nvml();
    if (!api) {
      t.problem_ = api.error().message;
      return t;
    }
    nvmlReturn r = -1;
    if (!pci_bus_id.empty()) r = (*api)->handle_by_pci(std::string(pci_bus_id).c_str(), &source->nvml_device);
    if (r != kNvmlSuccess) r = (*api)->handle_by_index(unsigned(ordinal), &source->nvml_device);
    if (r != kNvmlSuccess) {
      t.problem_ = fmt::format("NVML has no GPU {} ({}): {}", pci_bus_id, ordinal, (*api)->error_string(r));
      return t;
    }
    source->nvml = *api;
  } else if (runtime == "hip") {
    auto api = rsmi();
    if (!api) {
      t.problem_ = api.error().message;
      return t;
    }
    std::uint32_t n = 0;
    (*api)->num_devices(&n);
    auto want = pci_bdf_id(pci_bus_id);
    bool found = false;
    for (std::uint32_t i = 0; i < n && !found; ++i) {
      std::uint64_t bdf = 0;
      // ROCm 6 puts a partition id in bits 28..31; the PCI address is the rest.
      if (want && (*api)->pci_id(i, &bdf) == kRsmiSuccess && (bdf & ~0xF000'0000ull) == *want) {
        source->rsmi_index = i;
        found = true;
      }
    }
    if (!found && ordinal >= 0 && std::uint32_t(ordinal) < n && !want) {
      source->rsmi_index = std::uint32_t(ordinal);
      found = true;
    }
    if (!found) {
      t.problem_ = fmt::format("ROCm SMI has no GPU at {} ({} devices)", pci_bus_id.empty() ? "?" : pci_bus_id, n);
      return t;
    }
    source->rsmi = *api;
  } else {
    t.problem_ = fmt::format("no telemetry for runtime '{}'", runtime);
    return t;
  }
  t.source_ = std::move(source);
  return t;
}

std::string Telemetry::library() const {
  if (!source_) return {};
  return source_->nvml ? source_->nvml->lib.path() : source_->rsmi->lib.path();
}

TelemetryReading Telemetry::read() const {
  TelemetryReading out;
  if (!source_) return out;
  if (const NvmlApi* n = source_->nvml.get()) {
    unsigned v = 0;
    if (n->clock_info(source_->nvml_device, kNvmlClockSm, &v) == kNvmlSuccess) out.sm_clock_mhz = int(v);
    if (n->clock_info(source_->nvml_device, kNvmlClockMem, &v) == kNvmlSuccess) out.memory_clock_mhz = int(v);
    if (n->temperature(source_->nvml_device, kNvmlTemperatureGpu, &v) == kNvmlSuccess) out.temperature_c = double(v);
    if (n->power_usage(source_->nvml_device, &v) == kNvmlSuccess) out.power_w = v / 1000.0;
    return out;
  }
  const RsmiApi* r = source_->rsmi.get();
  std::uint32_t i = source_->rsmi_index;
  auto clock = [&](int type) -> std::optional<int> {
    alignas(8) std::byte rec[kRsmiFrequenciesBytes] = {};
    if (r->clock(i, type, rec) != kRsmiSuccess) return std::nullopt;
    return rsmi_current_frequency_mhz(rec, r->major);
  };
  out.sm_clock_mhz = clock(kRsmiClkSys);
  out.memory_clock_mhz = clock(kRsmiClkMem);
  std::int64_t milli_c = 0;
  // MI300-class parts report no edge sensor; the junction (hotspot) one then.
  if (r->temperature(i, kRsmiTempEdge, kRsmiTempCurrent, &milli_c) == kRsmiSuccess ||
      r->temperature(i, kRsmiTempJunction, kRsmiTempCurrent, &milli_c) == kRsmiSuccess)
    out.temperature_c = milli_c / 1000.0;
  std::uint64_t micro_w = 0;
  if ((r->socket_power && r->socket_power(i, &micro_w) == kRsmiSuccess) ||
      (r->power_average && r->power_average(i, 0, &micro_w) == kRsmiSuccess))
    out.power_w = micro_w / 1e6;
  return out;
}

std::optional<std::string> nvidia_driver_version() {
  auto api = nvml();
  if (!api) return std::nullopt;
  char buf[96] = {};
  if ((*api)->driver_version(buf, sizeof buf) != kNvmlSuccess) return std::nullopt;
  return std::string(buf);
}

}  // namespace ft
