#pragma once
// A Device for the runtime's tests without a GPU: it records what the runtime
// asks of a GPU (memsets, launches with their argument bytes, synchronisations)
// and loads anything; memory copies and allocations fail.
#include <cstring>
#include <string>
#include <vector>

#include "layer/device_structs.hpp"
#include "device/device.hpp"

namespace ft::test {

// Records what the runtime asks of a GPU; loads anything.
class FakeDevice : public Device {
 public:
  struct Launch {
    std::string symbol;
    Dim3 grid, block;
    int shared = 0;
    MoeArgs args{};                 // the layer kernels' argument
    std::vector<std::byte> raw_args;  // any kernel's argument, as passed
  };
  explicit FakeDevice(std::string arch) { info_.runtime = "cuda", info_.name = "Fake GPU", info_.arch = std::move(arch); }
  const DeviceInfo& info() const override { return info_; }
  Result<DevicePtr> alloc(std::size_t) override { return fail(Errc::device, "fake"); }
  Status free(DevicePtr) override { return {}; }
  Status copy_to_device(DevicePtr, const void*, std::size_t, StreamHandle) override { return fail(Errc::device, "fake"); }
  Status copy_to_host(void*, DevicePtr, std::size_t, StreamHandle) override { return fail(Errc::device, "fake"); }
  Status copy_device(DevicePtr, DevicePtr, std::size_t, StreamHandle) override { return fail(Errc::device, "fake"); }
  Status memset_u32(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle s) override {
    events.push_back("memset " + std::to_string(dst) + " " + std::to_string(value) + " x" + std::to_string(count) +
                     (s.p ? " stream" : ""));
    return {};
  }
  Result<ModuleHandle> load_module(std::span<const std::byte> image) override {
    ++modules_loaded;
    if (loads_out) ++*loads_out;  // outlives the device, which a refused open destroys
    return ModuleHandle{reinterpret_cast<void*>(image.size())};
  }
  Status unload_module(ModuleHandle) override { return {}; }
  Result<FunctionHandle> function(ModuleHandle, const std::string& name) override {
    symbols.push_back(name);
    return FunctionHandle{reinterpret_cast<void*>(symbols.size())};
  }
  Status set_dynamic_shared(FunctionHandle, int) override { return {}; }
  Status launch(FunctionHandle f, Dim3 grid, Dim3 block, int shared, StreamHandle s, const void* args,
                std::size_t size) override {
    Launch l{symbols.at(reinterpret_cast<std::size_t>(f.p) - 1), grid, block, shared, {}, {}};
    if (size == sizeof(MoeArgs)) std::memcpy(&l.args, args, size);
    l.raw_args.resize(size);
    std::memcpy(l.raw_args.data(), args, size);
    launches.push_back(l);
    events.push_back(std::string("launch ") + l.symbol + (s.p ? " stream" : ""));
    return {};
  }
  Result<StreamHandle> create_stream() override { return StreamHandle{}; }
  Status destroy_stream(StreamHandle) override { return {}; }
  Status synchronize(StreamHandle) override {
    events.push_back("synchronize");
    return {};
  }
  Result<EventHandle> create_event() override { return EventHandle{}; }
  Status destroy_event(EventHandle) override { return {}; }
  Status record(EventHandle, StreamHandle) override { return {}; }
  Result<float> elapsed_ms(EventHandle, EventHandle) override { return 0.f; }
  Status begin_capture(StreamHandle) override { return {}; }
  Result<GraphHandle> end_capture(StreamHandle) override { return GraphHandle{}; }
  Status launch_graph(GraphHandle, StreamHandle) override { return {}; }
  Status destroy_graph(GraphHandle) override { return {}; }

  DeviceInfo info_;
  int modules_loaded = 0;
  int* loads_out = nullptr;
  std::vector<std::string> symbols;
  std::vector<Launch> launches;
  std::vector<std::string> events;
};

}  // namespace ft::test
