#pragma once
// The device interface both GPU runtimes implement (CUDA driver API and HIP,
// each opened with dlopen). Everything above it -- workload, verification,
// timing, the export runtime -- talks to this, never to a vendor API.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "device/tensor_map.hpp"

namespace ft {

struct DeviceInfo {
  std::string runtime;          // "cuda" or "hip"
  int ordinal = 0;
  std::string name;             // "NVIDIA H200"
  std::string arch;             // the flytune target name: "sm_90a", "gfx942"
  int compute_units = 0;        // SMs or CUs
  std::size_t memory_bytes = 0;
  std::size_t l2_bytes = 0;
  int max_shared_per_block = 0; // with opt-in where the runtime has one
  int clock_mhz = 0;            // peak SM / shader clock the runtime reports
  std::string driver_version;   // "580.159.04" or the driver API number
  std::string runtime_version;  // "13.0", "5.2"
  std::string pci_bus_id;
};

// Opaque handles; each backend knows what they point to.
using DevicePtr = std::uint64_t;
struct ModuleHandle { void* p = nullptr; };
struct FunctionHandle { void* p = nullptr; };
struct StreamHandle { void* p = nullptr; };  // null: the default stream
struct EventHandle { void* p = nullptr; };
struct GraphHandle { void* p = nullptr; };  // an instantiated, launchable graph

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;

  virtual Result<DevicePtr> alloc(std::size_t bytes) = 0;
  virtual Status free(DevicePtr p) = 0;
  virtual Status copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle s = {}) = 0;
  virtual Status copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle s = {}) = 0;
  virtual Status copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle s = {}) = 0;
  virtual Status memset_u32(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle s = {}) = 0;

  virtual Result<ModuleHandle> load_module(std::span<const std::byte> image) = 0;
  virtual Status unload_module(ModuleHandle m) = 0;
  virtual Result<FunctionHandle> function(ModuleHandle m, const std::string& name) = 0;
  // Allow `bytes` of dynamic shared memory / LDS (CUDA needs this above 48 KiB).
  virtual Status set_dynamic_shared(FunctionHandle f, int bytes) = 0;
  // Launch with one by-value argument struct (the kernels' single parameter).
  virtual Status launch(FunctionHandle f, Dim3 grid, Dim3 block, int dynamic_shared, StreamHandle s,
                        const void* args, std::size_t args_size) = 0;

  // The bytes of a tensor map (device/tensor_map.hpp) for a kernel's TMA
  // copies, into `out` (an ft::TensorMap): refused with one line where the
  // spec breaks the TMA unit's rules, and on devices without a TMA unit (the default).
  virtual Status encode_tensor_map(const TensorMapSpec& spec, std::span<std::byte, kTensorMapBytes> out);

  virtual Result<StreamHandle> create_stream() = 0;
  virtual Status destroy_stream(StreamHandle s) = 0;
  virtual Status synchronize(StreamHandle s = {}) = 0;
  virtual Result<EventHandle> create_event() = 0;
  virtual Status destroy_event(EventHandle e) = 0;
  virtual Status record(EventHandle e, StreamHandle s = {}) = 0;
  virtual Result<float> elapsed_ms(EventHandle start, EventHandle stop) = 0;

  // Stream capture into a graph, then replay (graph-capturable launch paths).
  virtual Status begin_capture(StreamHandle s) = 0;
  virtual Result<GraphHandle> end_capture(StreamHandle s) = 0;
  virtual Status launch_graph(GraphHandle g, StreamHandle s) = 0;
  virtual Status destroy_graph(GraphHandle g) = 0;
};

// What one runtime reports on this machine.
struct RuntimeReport {
  std::string runtime;          // "cuda" or "hip"
  bool loaded = false;          // the library opened and initialised
  std::string library;          // which file loaded
  std::string version;          // driver / runtime version
  std::string problem;          // why it is not usable ("libcuda.so.1 not found", "no AMD GPU found")
  std::string detail;           // what the runtime said ("hipGetDeviceCount: hipErrorNoDevice")
  std::vector<DeviceInfo> devices;
};

}  // namespace ft
