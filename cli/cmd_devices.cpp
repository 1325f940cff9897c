// flytune devices: every GPU the HIP and CUDA runtimes see, and for each
// runtime without one, why. No GPU is a fact, not an error: exit 0.
#include <memory>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.hpp"
#include "device/runtimes.hpp"
#include "device/telemetry.hpp"

namespace ft::cli {
namespace {

struct DevicesOptions {
  bool json = false;
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// "hip: no AMD GPU found (libamdhip64.so.5 loaded, hipGetDeviceCount: hipErrorNoDevice)"
std::string why_no_gpu(const RuntimeReport& r) {
  std::string in_brackets = r.library.empty() ? "" : r.library + " loaded";
  if (!r.detail.empty()) in_brackets += (in_brackets.empty() ? "" : ", ") + r.detail;
  return in_brackets.empty() ? fmt::format("{}: {}", r.runtime, r.problem)
                             : fmt::format("{}: {} ({})", r.runtime, r.problem, in_brackets);
}

std::string telemetry_text(const Telemetry& t) {
  if (!t.available()) return "unavailable: " + t.problem();
  TelemetryReading now = t.read();
  std::string out;
  auto add = [&](std::string part) { out += (out.empty() ? "" : ", ") + part; };
  if (now.sm_clock_mhz) add(fmt::format("SM {} MHz", *now.sm_clock_mhz));
  if (now.memory_clock_mhz) add(fmt::format("memory {} MHz", *now.memory_clock_mhz));
  if (now.temperature_c) add(fmt::format("{:.0f} C", *now.temperature_c));
  if (now.power_w) add(fmt::format("{:.0f} W", *now.power_w));
  if (out.empty()) out = "no readings";
  return fmt::format("{} ({})", out, t.library());
}

nlohmann::json telemetry_json(const Telemetry& t) {
  if (!t.available()) return {{"unavailable_because", t.problem()}};
  TelemetryReading now = t.read();
  nlohmann::json j{{"library", t.library()}};
  auto put = [&](const char* key, auto value) {
    if (value) j[key] = *value;
  };
  put("sm_clock_mhz", now.sm_clock_mhz);
  put("memory_clock_mhz", now.memory_clock_mhz);
  put("temperature_c", now.temperature_c);
  put("power_w", now.power_w);
  return j;
}

int run_devices(const DevicesOptions& opt) {
  std::vector<RuntimeReport> reports = probe_runtimes();
  std::size_t gpus = 0;
  for (const RuntimeReport& r : reports) gpus += r.devices.size();

  if (opt.json) {
    nlohmann::json out{{"devices", nlohmann::json::array()}, {"runtimes", nlohmann::json::array()}};
    for (const RuntimeReport& r : reports) {
      // "loaded": the library file opened (what the text's "X loaded" says);
      // "initialised": the runtime also started (it cannot without a GPU).
      nlohmann::json rj{{"runtime", r.runtime},   {"loaded", !r.library.empty()}, {"initialised", r.loaded},
                        {"library", r.library},   {"version", r.version},         {"gpus", r.devices.size()}};
      if (!r.problem.empty()) rj["problem"] = r.problem;
      if (!r.detail.empty()) rj["detail"] = r.detail;
      out["runtimes"].push_back(rj);
      for (const DeviceInfo& d : r.devices) {
        out["devices"].push_back({{"device", device_selector(d)},
                                  {"runtime", d.runtime},
                                  {"ordinal", d.ordinal},
                                  {"name", d.name},
                                  {"arch", d.arch},
                                  {"compute_units", d.compute_units},
                                  {"memory_bytes", d.memory_bytes},
                                  {"l2_bytes", d.l2_bytes},
                                  {"max_shared_per_block", d.max_shared_per_block},
                                  {"clock_mhz", d.clock_mhz},
                                  {"driver_version", d.driver_version},
                                  {"runtime_version", d.runtime_version},
                                  {"pci_bus_id", d.pci_bus_id},
                                  {"telemetry", telemetry_json(Telemetry::open(d))}});
      }
    }
    fmt::print("{}\n", out.dump(2));
    return 0;
  }

  if (gpus > 0) {
    fmt::print("{:<7} {:<24} {:<7} {:>7} {:>10} {:>8} {:>11} {:>9}  {:<20} {:<8} {}\n", "device", "name", "arch",
               "SMs/CUs", "memory", "L2", "shared/LDS", "clock", "driver", "runtime", "PCI bus");
    for (const RuntimeReport& r : reports)
      for (const DeviceInfo& d : r.devices) {
        fmt::print("{:<7} {:<24} {:<7} {:>7} {:>6.1f} GiB {:>4.0f} MiB {:>7} KiB {:>5} MHz  {:<20} {:<8} {}\n",
                   device_selector(d), d.name, d.arch, d.compute_units, d.memory_bytes / kGiB, d.l2_bytes / kMiB,
                   d.max_shared_per_block / 1024, d.clock_mhz, d.driver_version, d.runtime_version, d.pci_bus_id);
        fmt::print("        now: {}\n", telemetry_text(Telemetry::open(d)));
      }
  }
  for (const RuntimeReport& r : reports)
    if (!r.problem.empty()) fmt::print("{}\n", why_no_gpu(r));
  if (gpus == 0) fmt::print("no GPU found\n");
  return 0;
}

}  // namespace

Command setup_devices(CLI::App& app) {
  auto opt = std::make_shared<DevicesOptions>();
  CLI::App* sub = app.add_subcommand("devices", "List the GPUs the HIP and CUDA runtimes see here, or why there are none");
  sub->add_flag("--json", opt->json, "Print JSON instead of a table");
  sub->footer("Examples:\n  flytune devices\n  flytune devices --json");
  return {sub, [opt] { return run_devices(*opt); }};
}

}  // namespace ft::cli
