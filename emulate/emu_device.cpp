#include "emulate/emu_device.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "system/dynlib.hpp"
#include "emulate/grid.hpp"

#define FT_EMU_ABI_ONLY
#include "templates/ft/port_emu.hpp"
#include "templates/ft/int_types.hpp"
#include "templates/ft/tensor_map.hpp"

namespace ft::emu {

namespace {

struct EmuFunction {
  std::string name;
  void (*entry)(const void*) = nullptr;
  unsigned args_size = 0;
  int max_threads = 0;
  int shared_limit = 0;  // dynamic LDS this function may use now
};

// The in-memory file a library was loaded from stays open while it is loaded:
// glibc knows libraries by path, and a reused descriptor number would make a
// later dlopen of /proc/self/fd/N return this library again.
struct MemoryFile {
  int fd = -1;
  ~MemoryFile() {
    if (fd >= 0) ::close(fd);
  }
};

struct EmuModule {
  MemoryFile file;  // declared first: closed after the library is unloaded
  DynLib library;
  std::map<std::string, std::unique_ptr<EmuFunction>> functions;
};

struct EmuStream {};
struct EmuEvent {
  std::chrono::steady_clock::time_point when{};
  bool recorded = false;
};
struct EmuGraph {
  std::vector<std::function<Status()>> ops;
};

}  // namespace

struct EmuDevice::State {
  std::mutex mutex;
  std::map<std::uintptr_t, std::size_t> allocations;  // start -> size
  std::vector<std::unique_ptr<EmuModule>> modules;
  std::vector<std::unique_ptr<EmuStream>> streams;
  std::vector<std::unique_ptr<EmuEvent>> events;
  std::vector<std::unique_ptr<EmuGraph>> graphs;
  void* capturing = nullptr;             // the stream being captured (nullptr: none)
  bool capturing_default = false;        // capture on the default stream
  std::unique_ptr<EmuGraph> capture;

  // [p, p + bytes) inside one live allocation.
  bool inside(std::uintptr_t p, std::size_t bytes) {
    auto it = allocations.upper_bound(p);
    if (it == allocations.begin()) return false;
    --it;
    return p >= it->first && p + bytes <= it->first + it->second;
  }
  bool captures(StreamHandle s) const { return capture && (s.p ? s.p == capturing : capturing_default); }
  // The default stream or one created and not destroyed: a driver answers a
  // destroyed stream with an invalid-handle error, and so does the emulator.
  bool live(StreamHandle s) const {
    return !s.p || std::any_of(streams.begin(), streams.end(), [&](const auto& p) { return p.get() == s.p; });
  }
};

Result<std::unique_ptr<EmuDevice>> EmuDevice::create(const Target& target, EmuDeviceOptions options) {
  if (options.fibers == FiberSwitch::fast && !fast_fiber_switch_available())
    return fail(Errc::invalid_input, "the fast fiber switch is not available on this architecture; use ucontext");
  std::unique_ptr<EmuDevice> d(new EmuDevice());
  d->target_ = &target;
  if (options.workers <= 0) options.workers = int(std::clamp(std::thread::hardware_concurrency(), 1u, 8u));
  d->options_ = options;
  d->state_ = std::make_unique<State>();
  DeviceInfo& i = d->info_;
  i.runtime = "emu";
  i.ordinal = options.index;
  i.pci_bus_id = fmt::format("emu:{}:{}", target.name, options.index);
  i.name = fmt::format("flytune CPU emulator ({})", target.name);
  i.arch = std::string(target.name);
  i.compute_units = options.workers;
  i.memory_bytes = std::size_t(sysconf(_SC_PHYS_PAGES)) * std::size_t(sysconf(_SC_PAGESIZE));
  i.max_shared_per_block = target.lds_bytes;
  i.runtime_version = fmt::format("emu abi {}", kAbiVersion);
  i.driver_version = "none";
  return d;
}

EmuDevice::~EmuDevice() {
  if (!state_) return;
  for (auto& [p, size] : state_->allocations) std::free(reinterpret_cast<void*>(p));
}

Result<DevicePtr> EmuDevice::alloc(std::size_t bytes) {
  const std::size_t size = std::max<std::size_t>((bytes + 255) / 256 * 256, 256);
  void* p = std::aligned_alloc(256, size);
  if (!p) return fail(Errc::device, fmt::format("out of host memory allocating {} bytes", bytes), info_.name);
  std::lock_guard lock(state_->mutex);
  state_->allocations[reinterpret_cast<std::uintptr_t>(p)] = size;
  return DevicePtr(reinterpret_cast<std::uintptr_t>(p));
}

Status EmuDevice::free(DevicePtr p) {
  if (p == 0) return {};
  std::lock_guard lock(state_->mutex);
  auto it = state_->allocations.find(std::uintptr_t(p));
  if (it == state_->allocations.end())
    return fail(Errc::device, fmt::format("free of 0x{:x}, which is not an allocation", p), info_.name);
  std::free(reinterpret_cast<void*>(it->first));
  state_->allocations.erase(it);
  return {};
}

namespace {

Status bad_range(const std::string& device, const char* what, DevicePtr p, std::size_t bytes) {
  return fail(Errc::device, fmt::format("{}: [0x{:x}, +{}) is not inside one allocation", what, p, bytes), device);
}

Status dead_stream(const std::string& device, const char* what, StreamHandle s) {
  return fail(Errc::device, fmt::format("{} on stream {}, which is not a live stream of this device (destroyed?)", what, s.p),
              device);
}

}  // namespace

bool EmuDevice::inside(DevicePtr p, std::size_t bytes) const {
  return options_.host_memory || state_->inside(p, bytes);
}

Status EmuDevice::copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle s) {
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->live(s)) return dead_stream(info_.name, "copy to device", s);
    if (!inside(dst, bytes)) return bad_range(info_.name, "copy to device", dst, bytes);
    if (state_->captures(s)) {
      // Like a graph memcpy node from pageable memory: the source is read at replay.
      state_->capture->ops.push_back([=] {
        std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
        return Status{};
      });
      return {};
    }
  }
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return {};
}

Status EmuDevice::copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle s) {
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->live(s)) return dead_stream(info_.name, "copy to host", s);
    if (!inside(src, bytes)) return bad_range(info_.name, "copy to host", src, bytes);
    if (state_->captures(s)) {
      state_->capture->ops.push_back([=] {
        std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
        return Status{};
      });
      return {};
    }
  }
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return {};
}

Status EmuDevice::copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle s) {
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->live(s)) return dead_stream(info_.name, "device copy", s);
    if (!inside(dst, bytes)) return bad_range(info_.name, "device copy destination", dst, bytes);
    if (!inside(src, bytes)) return bad_range(info_.name, "device copy source", src, bytes);
    if (state_->captures(s)) {
      state_->capture->ops.push_back([=] {
        std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
        return Status{};
      });
      return {};
    }
  }
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return {};
}

Status EmuDevice::memset_u32(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle s) {
  auto fill = [=] {
    auto* p = reinterpret_cast<std::uint32_t*>(dst);
    std::fill(p, p + count, value);
    return Status{};
  };
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->live(s)) return dead_stream(info_.name, "memset", s);
    if (dst % 4 != 0 || !inside(dst, count * 4)) return bad_range(info_.name, "memset", dst, count * 4);
    if (state_->captures(s)) {
      state_->capture->ops.push_back(fill);
      return {};
    }
  }
  return fill();
}

Result<ModuleHandle> EmuDevice::load_module(std::span<const std::byte> image) {
  // dlopen needs a file: an anonymous in-memory one.
  const int fd = memfd_create("flytune-emu-kernels", MFD_CLOEXEC);
  if (fd < 0) return fail(Errc::device, fmt::format("memfd_create: {}", std::strerror(errno)), info_.name);
  std::size_t written = 0;
  while (written < image.size()) {
    const ssize_t n = ::write(fd, image.data() + written, image.size() - written);
    if (n <= 0) {
      ::close(fd);
      return fail(Errc::device, fmt::format("writing the kernel library: {}", std::strerror(errno)), info_.name);
    }
    written += std::size_t(n);
  }
  auto module = std::make_unique<EmuModule>();
  module->file.fd = fd;
  const std::string path = fmt::format("/proc/self/fd/{}", fd);
  // Unloadable: the descriptor number (and so the path) is reused after unload.
  auto lib = DynLib::open({path}, "emulated kernel library", DynLib::Lifetime::until_closed);
  if (!lib) return std::unexpected(with_context(lib.error(), info_.name));
  unsigned (*bind)(const Runtime*) = nullptr;
  if (!lib->bind(bind, FT_EMU_BIND_SYMBOL))
    return fail(Errc::device, "the library has no " FT_EMU_BIND_SYMBOL ": not built by compile_emulated()", info_.name);
  if (const unsigned abi = bind(runtime_table()); abi != kAbiVersion)
    return fail(Errc::device, fmt::format("the library was built for emulator ABI {}, this flytune runs ABI {}; rebuild it", abi,
                                          kAbiVersion),
                info_.name);
  module->library = std::move(*lib);
  std::lock_guard lock(state_->mutex);
  state_->modules.push_back(std::move(module));
  return ModuleHandle{state_->modules.back().get()};
}

Status EmuDevice::unload_module(ModuleHandle m) {
  std::lock_guard lock(state_->mutex);
  auto it = std::find_if(state_->modules.begin(), state_->modules.end(), [&](const auto& p) { return p.get() == m.p; });
  if (it == state_->modules.end()) return fail(Errc::device, "unload of an unknown module", info_.name);
  state_->modules.erase(it);
  return {};
}

Result<FunctionHandle> EmuDevice::function(ModuleHandle m, const std::string& name) {
  std::lock_guard lock(state_->mutex);
  auto it = std::find_if(state_->modules.begin(), state_->modules.end(), [&](const auto& p) { return p.get() == m.p; });
  if (it == state_->modules.end()) return fail(Errc::device, "function lookup in an unknown module", info_.name);
  EmuModule& module = **it;
  if (auto f = module.functions.find(name); f != module.functions.end()) return FunctionHandle{f->second.get()};
  auto fn = std::make_unique<EmuFunction>();
  fn->name = name;
  const unsigned* args_size = nullptr;
  const int* max_threads = nullptr;
  if (!module.library.bind(fn->entry, (name + FT_EMU_ENTRY_SUFFIX).c_str()) ||
      !(args_size = static_cast<const unsigned*>(module.library.symbol((name + FT_EMU_ARGS_SIZE_SUFFIX).c_str()))) ||
      !(max_threads = static_cast<const int*>(module.library.symbol((name + FT_EMU_MAX_THREADS_SUFFIX).c_str()))))
    return fail(Errc::not_found, fmt::format("no kernel entry '{}' in the emulated library", name), info_.name);
  fn->args_size = *args_size;
  fn->max_threads = *max_threads;
  fn->shared_limit = target_->lds_without_opt_in;
  FunctionHandle h{fn.get()};
  module.functions.emplace(name, std::move(fn));
  return h;
}

Result<unsigned> EmuDevice::args_size(FunctionHandle f) const {
  const auto* fn = static_cast<const EmuFunction*>(f.p);
  if (!fn) return fail(Errc::device, "args_size of a null function", info_.name);
  return fn->args_size;
}

Status EmuDevice::encode_tensor_map(const TensorMapSpec& s, std::span<std::byte, kTensorMapBytes> out) {
  if (target_->sm < 90) return Device::encode_tensor_map(s, out);  // the TMA unit came with sm_90
  if (auto why = why_bad_tensor_map(s)) return fail(Errc::invalid_input, *why, info_.name);
  static_assert(sizeof(TensorMapEmu) <= kTensorMapBytes);
  const TensorMapEmu e{s.base, s.row_stride_bytes, s.cols, s.rows, s.box_cols, s.box_rows, s.elem_bytes, s.swizzle,
                       kTensorMapEmuMagic, 0};
  std::fill(out.begin(), out.end(), std::byte{0});
  std::memcpy(out.data(), &e, sizeof e);
  return {};
}

Status EmuDevice::set_dynamic_shared(FunctionHandle f, int bytes) {
  auto* fn = static_cast<EmuFunction*>(f.p);
  if (!fn) return fail(Errc::device, "set_dynamic_shared on a null function", info_.name);
  if (bytes > target_->lds_bytes)
    return fail(Errc::device, fmt::format("LDS use {} bytes exceeds {}", bytes, target_->lds_bytes),
                fmt::format("{}: {}", target_->name, fn->name));
  fn->shared_limit = std::max(fn->shared_limit, bytes);
  return {};
}

Status EmuDevice::launch(FunctionHandle f, Dim3 grid, Dim3 block, int dynamic_shared, StreamHandle s, const void* args,
                         std::size_t args_size) {
  auto* fn = static_cast<EmuFunction*>(f.p);
  if (!fn) return fail(Errc::device, "launch of a null function", info_.name);
  const std::string context = fmt::format("{}: {}", target_->name, fn->name);
  // As on the GPUs, a kernel reads the first bytes of a longer struct (a kernel of an older
  // export, before fields were appended to ft::MoeArgs); a shorter one is an error.
  if (args_size < fn->args_size)
    return fail(Errc::device, fmt::format("argument struct of {} bytes, the kernel takes {}", args_size, fn->args_size), context);
  const long long threads = (long long)block.x * block.y * block.z;
  if (threads <= 0 || threads > target_->max_block_threads)
    return fail(Errc::device, fmt::format("block of {} threads (at most {})", threads, target_->max_block_threads), context);
  if (threads > fn->max_threads)
    return fail(Errc::device, fmt::format("block of {} threads exceeds the kernel's launch bound {}", threads, fn->max_threads),
                context);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535)
    return fail(Errc::device, fmt::format("grid ({},{},{}) is not launchable", grid.x, grid.y, grid.z), context);
  if (dynamic_shared < 0 || dynamic_shared > target_->lds_bytes)
    return fail(Errc::device, fmt::format("LDS use {} bytes exceeds {}", dynamic_shared, target_->lds_bytes), context);
  if (dynamic_shared > fn->shared_limit)
    return fail(Errc::device,
                fmt::format("dynamic shared memory {} bytes exceeds the function's limit {} (raise it with set_dynamic_shared, "
                            "as cuFuncSetAttribute does)",
                            dynamic_shared, fn->shared_limit),
                context);

  auto run = [this, fn, grid, threads, dynamic_shared, bytes = std::vector<unsigned char>(
                                                              static_cast<const unsigned char*>(args),
                                                              static_cast<const unsigned char*>(args) + args_size)] {
    GridLaunch g;
    g.kernel = fn->name;
    g.entry = fn->entry;
    g.args = bytes.data();
    g.grid[0] = grid.x;
    g.grid[1] = grid.y;
    g.grid[2] = grid.z;
    g.block_threads = int(threads);
    g.dynamic_lds = dynamic_shared;
    g.workers = options_.workers;
    g.interleave = options_.interleave;
    g.schedule_seed = options_.schedule_seed;
    g.fibers = options_.fibers;
    g.lane_stack_bytes = options_.lane_stack_bytes;
    return run_grid(g);
  };
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->live(s)) return dead_stream(info_.name, "launch", s);
    if (state_->captures(s)) {
      state_->capture->ops.push_back(std::move(run));
      return {};
    }
  }
  if (auto r = run(); !r) return std::unexpected(with_context(r.error(), std::string(target_->name)));
  return {};
}

Result<StreamHandle> EmuDevice::create_stream() {
  std::lock_guard lock(state_->mutex);
  state_->streams.push_back(std::make_unique<EmuStream>());
  return StreamHandle{state_->streams.back().get()};
}

Status EmuDevice::destroy_stream(StreamHandle s) {
  std::lock_guard lock(state_->mutex);
  if (!s.p || !state_->live(s)) return dead_stream(info_.name, "destroy", s);
  std::erase_if(state_->streams, [&](const auto& p) { return p.get() == s.p; });
  return {};
}

Status EmuDevice::synchronize(StreamHandle s) {
  std::lock_guard lock(state_->mutex);
  if (!state_->live(s)) return dead_stream(info_.name, "synchronize", s);
  return {};
}

Result<EventHandle> EmuDevice::create_event() {
  std::lock_guard lock(state_->mutex);
  state_->events.push_back(std::make_unique<EmuEvent>());
  return EventHandle{state_->events.back().get()};
}

Status EmuDevice::destroy_event(EventHandle e) {
  std::lock_guard lock(state_->mutex);
  std::erase_if(state_->events, [&](const auto& p) { return p.get() == e.p; });
  return {};
}

Status EmuDevice::record(EventHandle e, StreamHandle) {
  auto* ev = static_cast<EmuEvent*>(e.p);
  if (!ev) return fail(Errc::device, "record of a null event", info_.name);
  ev->when = std::chrono::steady_clock::now();
  ev->recorded = true;
  return {};
}

Result<float> EmuDevice::elapsed_ms(EventHandle start, EventHandle stop) {
  auto* a = static_cast<EmuEvent*>(start.p);
  auto* b = static_cast<EmuEvent*>(stop.p);
  if (!a || !b || !a->recorded || !b->recorded) return fail(Errc::device, "elapsed time of an unrecorded event", info_.name);
  return std::chrono::duration<float, std::milli>(b->when - a->when).count();
}

Status EmuDevice::begin_capture(StreamHandle s) {
  std::lock_guard lock(state_->mutex);
  if (state_->capture) return fail(Errc::device, "a capture is already in progress", info_.name);
  state_->capture = std::make_unique<EmuGraph>();
  state_->capturing = s.p;
  state_->capturing_default = s.p == nullptr;
  return {};
}

Result<GraphHandle> EmuDevice::end_capture(StreamHandle s) {
  std::lock_guard lock(state_->mutex);
  if (!state_->capture || !state_->captures(s)) return fail(Errc::device, "end_capture without a capture on this stream", info_.name);
  state_->graphs.push_back(std::move(state_->capture));
  state_->capturing = nullptr;
  state_->capturing_default = false;
  return GraphHandle{state_->graphs.back().get()};
}

Status EmuDevice::launch_graph(GraphHandle g, StreamHandle s) {
  auto* graph = static_cast<EmuGraph*>(g.p);
  if (!graph) return fail(Errc::device, "launch of a null graph", info_.name);
  {
    std::lock_guard lock(state_->mutex);
    if (!state_->live(s)) return dead_stream(info_.name, "graph launch", s);
  }
  for (auto& op : graph->ops)
    if (auto r = op(); !r) return std::unexpected(with_context(r.error(), std::string(target_->name)));
  return {};
}

Status EmuDevice::destroy_graph(GraphHandle g) {
  std::lock_guard lock(state_->mutex);
  std::erase_if(state_->graphs, [&](const auto& p) { return p.get() == g.p; });
  return {};
}

}  // namespace ft::emu
