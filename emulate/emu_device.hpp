#pragma once
// The emulator as an ft::Device: memory is host memory, modules are libraries
// built by compile_emulated(), launches run on the CPU through run_grid(). The
// workload, verification and launch code written for the GPU runtimes runs on
// it unchanged. Everything is synchronous; streams order nothing, events read
// the host clock, and a captured graph replays the recorded operations.
#include <memory>

#include "generator/target.hpp"
#include "device/device.hpp"
#include "compile/emu_compile.hpp"
#include "emulate/fiber.hpp"

namespace ft::emu {

struct EmuDeviceOptions {
  int workers = 0;  // OS threads running blocks; 0: the machine's cores (at most 8); 1: deterministic order
  // Blocks a worker interleaves (GridLaunch::interleave) and the seed of their schedule.
  int interleave = 0;
  unsigned long long schedule_seed = 0;
  FiberSwitch fibers = fast_fiber_switch_available() ? FiberSwitch::fast : FiberSwitch::ucontext;
  std::size_t lane_stack_bytes = 128 * 1024;
  // Which emulated device of its target this is: the ordinal, and the
  // pci_bus_id "emu:<target>:<index>" that tells several apart in one search.
  int index = 0;
  // Memory the caller owns may be passed (the Python package's device="emulate":
  // XLA's host buffers): copies and memsets then skip the check that a range
  // lies inside one of this device's allocations.
  bool host_memory = false;
};

// The launch limits of the emulated target, checked as the GPU runtime would:
// block size at most 1024 and at most the kernel's declared launch bound;
// dynamic LDS at most Target::lds_bytes (and, on NVIDIA targets, at most 48 KiB
// unless set_dynamic_shared() raised the function's limit, as CUDA requires).
// Register use cannot be observed on the host; the code-object analysis of the
// GPU backends checks it.
class EmuDevice final : public Device {
 public:
  static Result<std::unique_ptr<EmuDevice>> create(const Target& target, EmuDeviceOptions options = {});
  ~EmuDevice() override;

  const Target& target() const { return *target_; }
  const DeviceInfo& info() const override { return info_; }

  Result<DevicePtr> alloc(std::size_t bytes) override;
  Status free(DevicePtr p) override;
  Status copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle s = {}) override;
  Status copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle s = {}) override;
  Status copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle s = {}) override;
  Status memset_u32(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle s = {}) override;

  // `image`: a shared library from compile_emulated() (EmuLibrary::binary).
  Result<ModuleHandle> load_module(std::span<const std::byte> image) override;
  Result<ModuleHandle> load_library(const EmuLibrary& library) { return load_module(library.binary); }
  Status unload_module(ModuleHandle m) override;
  Result<FunctionHandle> function(ModuleHandle m, const std::string& name) override;
  Status set_dynamic_shared(FunctionHandle f, int bytes) override;
  // TensorMapEmu (templates/ft/tensor_map.hpp), which the emulated TMA copies read.
  Status encode_tensor_map(const TensorMapSpec& spec, std::span<std::byte, kTensorMapBytes> out) override;
  // The size of the argument struct a function of this device takes (its host sizeof).
  Result<unsigned> args_size(FunctionHandle f) const;
  Status launch(FunctionHandle f, Dim3 grid, Dim3 block, int dynamic_shared, StreamHandle s, const void* args,
                std::size_t args_size) override;

  Result<StreamHandle> create_stream() override;
  Status destroy_stream(StreamHandle s) override;
  Status synchronize(StreamHandle s = {}) override;
  Result<EventHandle> create_event() override;
  Status destroy_event(EventHandle e) override;
  Status record(EventHandle e, StreamHandle s = {}) override;
  Result<float> elapsed_ms(EventHandle start, EventHandle stop) override;

  Status begin_capture(StreamHandle s) override;
  Result<GraphHandle> end_capture(StreamHandle s) override;
  Status launch_graph(GraphHandle g, StreamHandle s) override;
  Status destroy_graph(GraphHandle g) override;

  struct State;

 private:
  EmuDevice() = default;
  bool inside(DevicePtr p, std::size_t bytes) const;  // within one allocation (or options_.host_memory); holds state_->mutex
  const Target* target_ = nullptr;
  EmuDeviceOptions options_;
  DeviceInfo info_;
  std::unique_ptr<State> state_;
};

}  // namespace ft::emu
