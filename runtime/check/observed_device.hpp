#pragma once
// A Device in front of another (a GPU or the emulator) that counts what is
// live -- allocations and their bytes, streams, events, graphs, modules -- for
// the soak (soak.hpp: device memory flat under load), and can fail a chosen
// call for the fault tests: the `fail_at`-th call (1-based) of the kinds in
// `faults` is answered with Errc::device ("injected fault") instead of
// reaching the inner device.
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <map>
#include <string>

#include "device/device.hpp"

namespace ft::check {

enum Fault : unsigned { fault_alloc = 1, fault_load = 2, fault_launch = 4, fault_copy = 8, fault_stream = 16 };

// What an ObservedDevice saw; shared, so it outlives the device the runtime owns.
struct Observed {
  std::mutex mutex;
  std::map<DevicePtr, std::size_t> allocations;  // live: bytes asked for
  std::size_t allocated_bytes = 0;
  long streams = 0, events = 0, graphs = 0, modules = 0;
  std::atomic<long> calls{0};     // fallible calls of the fault kinds so far
  std::atomic<long> fail_at{0};   // 0: never
  unsigned faults = 0;
  std::atomic<long> injected{0};  // faults answered so far
  // A mutant runtime for the checks' own tests: memsets are answered without
  // reaching the device (a program's clears skipped), so what they clear keeps
  // whatever it held.
  std::atomic<bool> skip_memsets{false};
  std::size_t live_allocations() {
    std::lock_guard l(mutex);
    return allocations.size();
  }
};

class ObservedDevice final : public Device {
 public:
  ObservedDevice(std::unique_ptr<Device> inner, std::shared_ptr<Observed> seen) : inner_(std::move(inner)), seen_(std::move(seen)) {}
  const DeviceInfo& info() const override { return inner_->info(); }

  Result<DevicePtr> alloc(std::size_t bytes) override {
    FT_CHECK(inject(fault_alloc, "alloc"));
    auto p = FT_TRY(inner_->alloc(bytes));
    std::lock_guard l(seen_->mutex);
    seen_->allocations[p] = bytes;
    seen_->allocated_bytes += bytes;
    return p;
  }
  Status free(DevicePtr p) override {
    FT_CHECK(inner_->free(p));
    std::lock_guard l(seen_->mutex);
    if (auto it = seen_->allocations.find(p); it != seen_->allocations.end()) {
      seen_->allocated_bytes -= it->second;
      seen_->allocations.erase(it);
    }
    return {};
  }
  Status copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle s) override {
    FT_CHECK(inject(fault_copy, "copy_to_device"));
    return inner_->copy_to_device(dst, src, bytes, s);
  }
  Status copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle s) override {
    FT_CHECK(inject(fault_copy, "copy_to_host"));
    return inner_->copy_to_host(dst, src, bytes, s);
  }
  Status copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle s) override {
    FT_CHECK(inject(fault_copy, "copy_device"));
    return inner_->copy_device(dst, src, bytes, s);
  }
  Status memset_u32(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle s) override {
    FT_CHECK(inject(fault_launch, "memset"));
    if (seen_->skip_memsets) return {};
    return inner_->memset_u32(dst, value, count, s);
  }
  Result<ModuleHandle> load_module(std::span<const std::byte> image) override {
    FT_CHECK(inject(fault_load, "load_module"));
    auto m = FT_TRY(inner_->load_module(image));
    std::lock_guard l(seen_->mutex);
    ++seen_->modules;
    return m;
  }
  Status unload_module(ModuleHandle m) override {
    FT_CHECK(inner_->unload_module(m));
    std::lock_guard l(seen_->mutex);
    --seen_->modules;
    return {};
  }
  Result<FunctionHandle> function(ModuleHandle m, const std::string& name) override { return inner_->function(m, name); }
  Status set_dynamic_shared(FunctionHandle f, int bytes) override { return inner_->set_dynamic_shared(f, bytes); }
  Status launch(FunctionHandle f, Dim3 grid, Dim3 block, int dynamic_shared, StreamHandle s, const void* args,
                std::size_t args_size) override {
    FT_CHECK(inject(fault_launch, "launch"));
    return inner_->launch(f, grid, block, dynamic_shared, s, args, args_size);
  }
  Result<StreamHandle> create_stream() override {
    FT_CHECK(inject(fault_stream, "create_stream"));
    auto s = FT_TRY(inner_->create_stream());
    std::lock_guard l(seen_->mutex);
    ++seen_->streams;
    return s;
  }
  Status destroy_stream(StreamHandle s) override {
    FT_CHECK(inner_->destroy_stream(s));
    std::lock_guard l(seen_->mutex);
    --seen_->streams;
    return {};
  }
  Status synchronize(StreamHandle s) override { return inner_->synchronize(s); }
  Result<EventHandle> create_event() override {
    auto e = FT_TRY(inner_->create_event());
    std::lock_guard l(seen_->mutex);
    ++seen_->events;
    return e;
  }
  Status destroy_event(EventHandle e) override {
    FT_CHECK(inner_->destroy_event(e));
    std::lock_guard l(seen_->mutex);
    --seen_->events;
    return {};
  }
  Status record(EventHandle e, StreamHandle s) override { return inner_->record(e, s); }
  Result<float> elapsed_ms(EventHandle a, EventHandle b) override { return inner_->elapsed_ms(a, b); }
  Status begin_capture(StreamHandle s) override { return inner_->begin_capture(s); }
  Result<GraphHandle> end_capture(StreamHandle s) override {
    auto g = FT_TRY(inner_->end_capture(s));
    std::lock_guard l(seen_->mutex);
    ++seen_->graphs;
    return g;
  }
  Status launch_graph(GraphHandle g, StreamHandle s) override { return inner_->launch_graph(g, s); }
  Status destroy_graph(GraphHandle g) override {
    FT_CHECK(inner_->destroy_graph(g));
    std::lock_guard l(seen_->mutex);
    --seen_->graphs;
    return {};
  }

 private:
  Status inject(Fault kind, const char* what) {
    if (!(seen_->faults & kind)) return {};
    const long n = ++seen_->calls;
    if (n != seen_->fail_at.load()) return {};
    ++seen_->injected;
    return fail(Errc::device, std::string("injected fault: ") + what + " (call " + std::to_string(n) + ")", info().name);
  }

  std::unique_ptr<Device> inner_;
  std::shared_ptr<Observed> seen_;
};

}  // namespace ft::check
