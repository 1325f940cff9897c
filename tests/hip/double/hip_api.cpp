// The HIP runtime calls flytune's device/hip_device.cpp binds, over the
// double's emulated GPUs (emulated_gpu.hpp). Selected with
// FLYTUNE_LIBHIP=<this library>. Every failure returns the error code the
// HIP runtime would and keeps the double's reason, which hipGetErrorString
// gives back (the real runtime's string says less).
#include <hip/hip_runtime_api.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include <fmt/format.h>

#include "tests/hip/double/emulated_gpu.hpp"
#include "tests/hip/double/faults.hpp"

using ft::hip_double::Double;
using ft::hip_double::Gpu;

struct ihipStream_t {
  int gpu = 0;
  ft::StreamHandle emu;
};
// An event's record number (0: never recorded) and whether a synchronize
// after that record completed it: a real GPU's event is not ready until the
// work before it is done, so its time cannot be read before a synchronize.
struct ihipEvent_t {
  int gpu = 0;
  ft::EventHandle emu;
  unsigned long long recorded = 0;
  bool completed = false;
};
struct ihipModule_t {
  ft::hip_double::Module* module = nullptr;
};
struct ihipModuleSymbol_t {
  int gpu = 0;
  const ft::hip_double::Kernel* kernel = nullptr;
};
// A captured graph and its instantiation share the emulator's graph.
struct EmuGraph {
  int gpu = 0;
  ft::GraphHandle emu;
  ~EmuGraph();
};
struct ihipGraph {
  std::shared_ptr<EmuGraph> graph;
};
struct hipGraphExec {
  std::shared_ptr<EmuGraph> graph;
};

namespace {

thread_local int current_gpu = 0;
// Event records in order, and the last record a stream or device synchronize
// covered (the double runs everything when it is called, so a synchronize
// covers every record before it).
std::atomic<unsigned long long> records{0}, synchronized_through{0};
void synchronized() { synchronized_through = records.load(); }
thread_local std::string last_reason;

hipError_t failed(hipError_t code, std::string reason) {
  last_reason = std::move(reason);
  return code;
}

hipError_t failed(hipError_t code, const ft::Error& e) { return failed(code, e.describe()); }

// The double, or the reason it has no GPUs.
Double* the_double(hipError_t* why) {
  auto d = Double::get();
  if (!d) {
    *why = failed(hipErrorNoDevice, d.error());
    return nullptr;
  }
  return *d;
}

#define FT_HIP_DOUBLE(d)                          \
  hipError_t ft_why_ = hipSuccess;                \
  Double* d = the_double(&ft_why_);               \
  if (!d) return ft_why_;

Gpu* gpu_of(Double& d, int index) { return index >= 0 && index < d.count() ? &d.gpu(index) : nullptr; }

// The streams hipStreamCreate made and hipStreamDestroy has not freed. A call
// on any other non-null stream (another runtime's, XLA's of a CUDA device, a
// destroyed one) is refused with hipErrorInvalidHandle before the double reads
// it; the real runtime would read through the pointer.
std::mutex streams_mutex;
std::unordered_set<hipStream_t> live_streams;
bool is_live(hipStream_t s) {
  std::lock_guard lock(streams_mutex);
  return !s || live_streams.count(s) > 0;
}
#define FT_HIP_STREAM(s)                                                                                      \
  if (!is_live(s))                                                                                            \
    return failed(hipErrorInvalidHandle, fmt::format("{} is not a stream of the flytune HIP double (not made " \
                                                     "by its hipStreamCreate, or destroyed)", static_cast<void*>(s)));

// A stream's GPU and emulator stream (the null stream: the current GPU's default).
Gpu& stream_gpu(Double& d, hipStream_t s) { return d.gpu(s ? s->gpu : current_gpu); }
ft::StreamHandle emu_stream(hipStream_t s) { return s ? s->emu : ft::StreamHandle{}; }

hipError_t status(const ft::Status& s, hipError_t code = hipErrorInvalidValue) {
  return s ? hipSuccess : failed(code, s.error());
}

}  // namespace

EmuGraph::~EmuGraph() {
  if (auto d = Double::get(); d && *d) (void)(*d)->gpu(gpu).emu->destroy_graph(emu);
}

extern "C" {

const char* hipGetErrorName(hipError_t e) {
  switch (e) {
    case hipSuccess: return "hipSuccess";
    case hipErrorInvalidValue: return "hipErrorInvalidValue";
    case hipErrorOutOfMemory: return "hipErrorOutOfMemory";
    case hipErrorInvalidConfiguration: return "hipErrorInvalidConfiguration";
    case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
    case hipErrorInvalidImage: return "hipErrorInvalidImage";
    case hipErrorNoBinaryForGpu: return "hipErrorNoBinaryForGpu";
    case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
    case hipErrorNotFound: return "hipErrorNotFound";
    case hipErrorNoDevice: return "hipErrorNoDevice";
    case hipErrorLaunchFailure: return "hipErrorLaunchFailure";
    case hipErrorStreamCaptureUnsupported: return "hipErrorStreamCaptureUnsupported";
    case hipErrorNotReady: return "hipErrorNotReady";
    case hipErrorIllegalState: return "hipErrorIllegalState";
    default: return "hipErrorUnknown";
  }
}

const char* hipGetErrorString(hipError_t) { return last_reason.c_str(); }

hipError_t hipInit(unsigned) {
  FT_HIP_DOUBLE(d);
  (void)d;
  return hipSuccess;
}

hipError_t hipGetDeviceCount(int* count) {
  FT_HIP_DOUBLE(d);
  *count = d->count();
  return d->count() > 0 ? hipSuccess : failed(hipErrorNoDevice, "FLYTUNE_HIP_DOUBLE_GPUS lists no GPU");
}

// ROCm 6.4's numbering (HIP_VERSION: major * 10^7 + minor * 10^5 + patch).
hipError_t hipDriverGetVersion(int* v) {
  *v = 60400000;
  return hipSuccess;
}
hipError_t hipRuntimeGetVersion(int* v) {
  *v = 60400000;
  return hipSuccess;
}

hipError_t hipDeviceGetAttribute(int* value, hipDeviceAttribute_t attr, int device) {
  FT_HIP_DOUBLE(d);
  Gpu* g = gpu_of(*d, device);
  if (!g) return failed(hipErrorInvalidDevice, fmt::format("no GPU {}", device));
  const auto& m = g->model;
  switch (attr) {
    case hipDeviceAttributeMultiprocessorCount: *value = m.compute_units; break;
    case hipDeviceAttributeL2CacheSize: *value = int(m.l2_bytes); break;
    case hipDeviceAttributeMaxSharedMemoryPerBlock: *value = m.target->lds_bytes; break;
    case hipDeviceAttributeClockRate: *value = m.clock_khz; break;
    case hipDeviceAttributeWarpSize: *value = m.target->wave_size; break;
    case hipDeviceAttributeMaxThreadsPerBlock: *value = m.target->max_block_threads; break;
    default: return failed(hipErrorInvalidValue, fmt::format("the HIP double does not model attribute {}", int(attr)));
  }
  return hipSuccess;
}

hipError_t hipDeviceGetName(char* name, int len, hipDevice_t device) {
  FT_HIP_DOUBLE(d);
  Gpu* g = gpu_of(*d, device);
  if (!g) return failed(hipErrorInvalidDevice, fmt::format("no GPU {}", device));
  if (len <= 0) return failed(hipErrorInvalidValue, "name buffer of no bytes");
  std::snprintf(name, std::size_t(len), "%s", g->model.name.c_str());
  return hipSuccess;
}

hipError_t hipDeviceTotalMem(size_t* bytes, hipDevice_t device) {
  FT_HIP_DOUBLE(d);
  Gpu* g = gpu_of(*d, device);
  if (!g) return failed(hipErrorInvalidDevice, fmt::format("no GPU {}", device));
  *bytes = g->model.memory_bytes;
  return hipSuccess;
}

hipError_t hipDeviceGetPCIBusId(char* bus, int len, int device) {
  FT_HIP_DOUBLE(d);
  Gpu* g = gpu_of(*d, device);
  if (!g || len <= 0) return failed(hipErrorInvalidDevice, fmt::format("no GPU {}", device));
  std::snprintf(bus, std::size_t(len), "hip-double:%s:%d", std::string(g->model.target->name).c_str(), device);
  return hipSuccess;
}

// flytune reads the properties into a generous buffer and looks only for the
// gcnArchName string (hip_device.hpp); the double writes the ROCm 5 layout of
// this header, under the ROCm 6 name flytune binds first.
hipError_t hipGetDevicePropertiesR0600(void* out, int device) {
  FT_HIP_DOUBLE(d);
  Gpu* g = gpu_of(*d, device);
  if (!g) return failed(hipErrorInvalidDevice, fmt::format("no GPU {}", device));
  hipDeviceProp_t p{};
  std::snprintf(p.name, sizeof p.name, "%s", g->model.name.c_str());
  std::snprintf(p.gcnArchName, sizeof p.gcnArchName, "%s", g->model.gcn_arch_name.c_str());
  p.multiProcessorCount = g->model.compute_units;
  p.totalGlobalMem = g->model.memory_bytes;
  p.sharedMemPerBlock = std::size_t(g->model.target->lds_bytes);
  p.warpSize = g->model.target->wave_size;
  p.maxThreadsPerBlock = g->model.target->max_block_threads;
  p.clockRate = g->model.clock_khz;
  p.l2CacheSize = int(g->model.l2_bytes);
  std::memcpy(out, &p, sizeof p);
  return hipSuccess;
}

hipError_t hipSetDevice(int device) {
  FT_HIP_DOUBLE(d);
  if (!gpu_of(*d, device)) return failed(hipErrorInvalidDevice, fmt::format("no GPU {} ({} found)", device, d->count()));
  current_gpu = device;
  return hipSuccess;
}

hipError_t hipDeviceSynchronize() {
  FT_HIP_DOUBLE(d);
  synchronized();
  return status(d->gpu(current_gpu).emu->synchronize());
}

hipError_t hipMalloc(void** p, size_t bytes) {
  FT_HIP_DOUBLE(d);
  auto r = d->gpu(current_gpu).emu->alloc(bytes);
  if (!r) return failed(hipErrorOutOfMemory, r.error());
  *p = reinterpret_cast<void*>(std::uintptr_t(*r));
  return hipSuccess;
}

hipError_t hipFree(void* p) {
  FT_HIP_DOUBLE(d);
  return status(d->gpu(current_gpu).emu->free(ft::DevicePtr(reinterpret_cast<std::uintptr_t>(p))));
}

namespace {
ft::DevicePtr dptr(const void* p) { return ft::DevicePtr(reinterpret_cast<std::uintptr_t>(p)); }
}  // namespace

hipError_t hipMemcpyHtoDAsync(hipDeviceptr_t dst, void* src, size_t bytes, hipStream_t s) {
  FT_HIP_DOUBLE(d);
  FT_HIP_STREAM(s);
  return status(stream_gpu(*d, s).emu->copy_to_device(dptr(dst), src, bytes, emu_stream(s)));
}

hipError_t hipMemcpyDtoHAsync(void* dst, hipDeviceptr_t src, size_t bytes, hipStream_t s) {
  FT_HIP_DOUBLE(d);
  FT_HIP_STREAM(s);
  return status(stream_gpu(*d, s).emu->copy_to_host(dst, dptr(src), bytes, emu_stream(s)));
}

hipError_t hipMemcpyDtoDAsync(hipDeviceptr_t dst, hipDeviceptr_t src, size_t bytes, hipStream_t s) {
  FT_HIP_DOUBLE(d);
  FT_HIP_STREAM(s);
  return status(stream_gpu(*d, s).emu->copy_device(dptr(dst), dptr(src), bytes, emu_stream(s)));
}

hipError_t hipMemsetD32Async(hipDeviceptr_t dst, int value, size_t count, hipStream_t s) {
  FT_HIP_DOUBLE(d);
  FT_HIP_STREAM(s);
  return status(stream_gpu(*d, s).emu->memset_u32(dptr(dst), std::uint32_t(value), count, emu_stream(s)));
}

hipError_t hipModuleLoadData(hipModule_t* module, const void* image) {
  FT_HIP_DOUBLE(d);
  if (!image) return failed(hipErrorInvalidValue, "hipModuleLoadData of a null image");
  const auto* bytes = static_cast<const std::byte*>(image);
  auto extent = ft::hip_double::elf_extent(bytes);
  if (!extent) return failed(hipErrorInvalidImage, extent.error());
  auto m = d->load(current_gpu, {bytes, *extent});
  if (!m) return failed(m.error().code == ft::Errc::invalid_input ? hipErrorNoBinaryForGpu : hipErrorInvalidImage, m.error());
  *module = new ihipModule_t{*m};
  return hipSuccess;
}

hipError_t hipModuleUnload(hipModule_t module) {
  FT_HIP_DOUBLE(d);
  if (!module) return failed(hipErrorInvalidHandle, "unload of a null module");
  const ft::Status s = d->unload(module->module);
  delete module;
  return status(s, hipErrorInvalidHandle);
}

hipError_t hipModuleGetFunction(hipFunction_t* f, hipModule_t module, const char* name) {
  FT_HIP_DOUBLE(d);
  if (!module || !d->live(module->module)) return failed(hipErrorInvalidHandle, "function lookup in a module not loaded");
  auto it = module->module->kernels.find(name);
  if (it == module->module->kernels.end())
    return failed(hipErrorNotFound, fmt::format("the code object has no kernel named '{}'", name));
  *f = new ihipModuleSymbol_t{module->module->gpu, &it->second};
  return hipSuccess;
}

hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                 unsigned bz, unsigned lds, hipStream_t s, void** params, void** extra) {
  FT_HIP_DOUBLE(d);
  if (!f) return failed(hipErrorInvalidHandle, "launch of a null function");
  FT_HIP_STREAM(s);
  if (s && s->gpu != f->gpu) return failed(hipErrorInvalidHandle, "a launch on another GPU's stream");
  Gpu& gpu = d->gpu(f->gpu);
  const ft::hip_double::LaunchRequest launch{{gx, gy, gz}, {bx, by, bz}, int(lds), params, extra};
  if (auto st = ft::hip_double::check_launch_shape(*f->kernel, gpu.model, launch); !st)
    return failed(hipErrorInvalidConfiguration, st.error());
  auto args = ft::hip_double::kernarg_bytes(*f->kernel, launch);
  if (!args) return failed(hipErrorInvalidValue, args.error());
  ft::hip_double::before_launch(f->kernel->meta.name);
  return status(gpu.emu->launch(f->kernel->emu, launch.grid, launch.block, launch.dynamic_lds, emu_stream(s), args->data(),
                                args->size()),
                hipErrorLaunchFailure);
}

hipError_t hipStreamCreate(hipStream_t* s) {
  FT_HIP_DOUBLE(d);
  auto r = d->gpu(current_gpu).emu->create_stream();
  if (!r) return failed(hipErrorOutOfMemory, r.error());
  *s = new ihipStream_t{current_gpu, *r};
  std::lock_guard lock(streams_mutex);
  live_streams.insert(*s);
  return hipSuccess;
}

hipError_t hipStreamDestroy(hipStream_t s) {
  FT_HIP_DOUBLE(d);
  if (!s) return failed(hipErrorInvalidHandle, "destroy of the null stream");
  FT_HIP_STREAM(s);
  {
    std::lock_guard lock(streams_mutex);
    live_streams.erase(s);
  }
  const ft::Status st = d->gpu(s->gpu).emu->destroy_stream(s->emu);
  delete s;
  return status(st, hipErrorInvalidHandle);
}

hipError_t hipStreamSynchronize(hipStream_t s) {
  FT_HIP_DOUBLE(d);
  FT_HIP_STREAM(s);
  synchronized();
  return status(stream_gpu(*d, s).emu->synchronize(emu_stream(s)), hipErrorInvalidHandle);
}

hipError_t hipEventCreate(hipEvent_t* e) {
  FT_HIP_DOUBLE(d);
  auto r = d->gpu(current_gpu).emu->create_event();
  if (!r) return failed(hipErrorOutOfMemory, r.error());
  *e = new ihipEvent_t{current_gpu, *r};
  return hipSuccess;
}

hipError_t hipEventDestroy(hipEvent_t e) {
  FT_HIP_DOUBLE(d);
  if (!e) return failed(hipErrorInvalidHandle, "destroy of a null event");
  const ft::Status st = d->gpu(e->gpu).emu->destroy_event(e->emu);
  delete e;
  return status(st, hipErrorInvalidHandle);
}

hipError_t hipEventRecord(hipEvent_t e, hipStream_t s) {
  FT_HIP_DOUBLE(d);
  if (!e) return failed(hipErrorInvalidHandle, "record of a null event");
  FT_HIP_STREAM(s);
  if (s && s->gpu != e->gpu) return failed(hipErrorInvalidHandle, "an event recorded on another GPU's stream");
  e->recorded = ++records;
  e->completed = false;
  return status(d->gpu(e->gpu).emu->record(e->emu, emu_stream(s)), hipErrorInvalidHandle);
}

// Everything the double runs is done when its call returns.
hipError_t hipEventSynchronize(hipEvent_t e) {
  if (!e) return failed(hipErrorInvalidHandle, "synchronize on a null event");
  e->completed = e->recorded != 0;
  return hipSuccess;
}

// The host time the emulator took between the two records: emulated time,
// which the device's name says wherever flytune shows or stores it.
hipError_t hipEventElapsedTime(float* ms, hipEvent_t start, hipEvent_t stop) {
  FT_HIP_DOUBLE(d);
  if (!start || !stop || start->gpu != stop->gpu) return failed(hipErrorInvalidHandle, "events of different GPUs");
  if (!start->recorded || !stop->recorded) return failed(hipErrorInvalidHandle, "elapsed time of an event never recorded");
  if (stop->recorded < start->recorded)
    return failed(hipErrorInvalidValue, "elapsed time from an event to one recorded before it (the events are swapped)");
  if (!stop->completed && stop->recorded > synchronized_through)
    return failed(hipErrorNotReady, "the stop event has not completed: no synchronize since it was recorded");
  auto r = d->gpu(start->gpu).emu->elapsed_ms(start->emu, stop->emu);
  if (!r) return failed(hipErrorNotReady, r.error());
  *ms = ft::hip_double::reported_elapsed_ms(*r);
  return hipSuccess;
}

hipError_t hipStreamBeginCapture(hipStream_t s, hipStreamCaptureMode) {
  FT_HIP_DOUBLE(d);
  FT_HIP_STREAM(s);
  if (!s) return failed(hipErrorStreamCaptureUnsupported, "capture on the null stream");
  return status(d->gpu(s->gpu).emu->begin_capture(s->emu), hipErrorIllegalState);
}

hipError_t hipStreamEndCapture(hipStream_t s, hipGraph_t* graph) {
  FT_HIP_DOUBLE(d);
  FT_HIP_STREAM(s);
  if (!s) return failed(hipErrorIllegalState, "end of a capture on the null stream");
  auto g = d->gpu(s->gpu).emu->end_capture(s->emu);
  if (!g) return failed(hipErrorIllegalState, g.error());
  auto owned = std::make_shared<EmuGraph>();
  owned->gpu = s->gpu;
  owned->emu = *g;
  *graph = new ihipGraph{std::move(owned)};
  return hipSuccess;
}

hipError_t hipGraphInstantiate(hipGraphExec_t* exec, hipGraph_t graph, hipGraphNode_t*, char*, size_t) {
  if (!graph) return failed(hipErrorInvalidValue, "instantiate of a null graph");
  *exec = new hipGraphExec{graph->graph};
  return hipSuccess;
}

hipError_t hipGraphLaunch(hipGraphExec_t exec, hipStream_t s) {
  FT_HIP_DOUBLE(d);
  if (!exec) return failed(hipErrorInvalidHandle, "launch of a null graph");
  FT_HIP_STREAM(s);
  if (s && s->gpu != exec->graph->gpu) return failed(hipErrorInvalidHandle, "a graph launched on another GPU's stream");
  return status(d->gpu(exec->graph->gpu).emu->launch_graph(exec->graph->emu, emu_stream(s)), hipErrorLaunchFailure);
}

hipError_t hipGraphExecDestroy(hipGraphExec_t exec) {
  delete exec;
  return hipSuccess;
}

hipError_t hipGraphDestroy(hipGraph_t graph) {
  delete graph;
  return hipSuccess;
}

}  // extern "C"
