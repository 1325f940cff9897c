#include "device/cuda_device.hpp"

#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include <fmt/format.h>

#include "device/call_error.hpp"
#include "device/telemetry.hpp"
#include "system/dynlib.hpp"

namespace ft {
namespace {

// cuda.h maps API names to their current versioned symbols (cuMemAlloc ->
// cuMemAlloc_v2, cuGraphInstantiate -> cuGraphInstantiateWithFlags). Members
// are declared and bound through the same macros, so each pointer has the
// prototype of the symbol it is bound to.
#define FT_CU_STR2(x) #x
#define FT_CU_STR(x) FT_CU_STR2(x)
#define FT_CU_FN(fn) decltype(&::fn) fn = nullptr;

struct CudaApi {
  DynLib lib;
  FT_CU_FN(cuGetErrorName)
  FT_CU_FN(cuGetErrorString)
  FT_CU_FN(cuInit)
  FT_CU_FN(cuDriverGetVersion)
  FT_CU_FN(cuDeviceGetCount)
  FT_CU_FN(cuDeviceGet)
  FT_CU_FN(cuDeviceGetName)
  FT_CU_FN(cuDeviceGetAttribute)
  FT_CU_FN(cuDeviceTotalMem)
  FT_CU_FN(cuDeviceGetPCIBusId)
  FT_CU_FN(cuDevicePrimaryCtxRetain)
  FT_CU_FN(cuDevicePrimaryCtxRelease)
  FT_CU_FN(cuCtxSetCurrent)
  FT_CU_FN(cuCtxSynchronize)
  FT_CU_FN(cuMemAlloc)
  FT_CU_FN(cuMemFree)
  FT_CU_FN(cuMemcpyHtoDAsync)
  FT_CU_FN(cuMemcpyDtoHAsync)
  FT_CU_FN(cuMemcpyDtoDAsync)
  FT_CU_FN(cuMemsetD32Async)
  FT_CU_FN(cuModuleLoadDataEx)
  FT_CU_FN(cuModuleUnload)
  FT_CU_FN(cuModuleGetFunction)
  FT_CU_FN(cuFuncSetAttribute)
  FT_CU_FN(cuLaunchKernel)
  FT_CU_FN(cuStreamCreate)
  FT_CU_FN(cuStreamDestroy)
  FT_CU_FN(cuStreamSynchronize)
  FT_CU_FN(cuEventCreate)
  FT_CU_FN(cuEventDestroy)
  FT_CU_FN(cuEventRecord)
  FT_CU_FN(cuEventSynchronize)
  FT_CU_FN(cuEventElapsedTime)
  FT_CU_FN(cuStreamBeginCapture)
  FT_CU_FN(cuStreamEndCapture)
  FT_CU_FN(cuGraphInstantiate)
  FT_CU_FN(cuGraphLaunch)
  FT_CU_FN(cuGraphExecDestroy)
  FT_CU_FN(cuGraphDestroy)
  FT_CU_FN(cuTensorMapEncodeTiled)

  std::string name(CUresult r) const {
    const char* s = nullptr;
    return cuGetErrorName(r, &s) == CUDA_SUCCESS && s ? s : fmt::format("CUresult {}", int(r));
  }
  std::string description(CUresult r) const {
    const char* s = nullptr;
    return cuGetErrorString(r, &s) == CUDA_SUCCESS && s ? s : "";
  }
  Status check(const char* call, CUresult r, const std::string& context) const {
    if (r == CUDA_SUCCESS) return {};
    return std::unexpected(runtime_call_error(call, name(r), description(r), context));
  }
};

Result<std::shared_ptr<CudaApi>> bind_cuda_api(DynLib lib) {
  auto api = std::make_shared<CudaApi>();
  api->lib = std::move(lib);
  std::string missing;
  auto need = [&](auto& fn, const char* symbol) {
    if (!api->lib.bind(fn, symbol)) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  };
#define FT_CU_BIND(fn) need(api->fn, FT_CU_STR(fn));
  FT_CU_BIND(cuGetErrorName)
  FT_CU_BIND(cuGetErrorString)
  FT_CU_BIND(cuInit)
  FT_CU_BIND(cuDriverGetVersion)
  FT_CU_BIND(cuDeviceGetCount)
  FT_CU_BIND(cuDeviceGet)
  FT_CU_BIND(cuDeviceGetName)
  FT_CU_BIND(cuDeviceGetAttribute)
  FT_CU_BIND(cuDeviceTotalMem)
  FT_CU_BIND(cuDeviceGetPCIBusId)
  FT_CU_BIND(cuDevicePrimaryCtxRetain)
  FT_CU_BIND(cuDevicePrimaryCtxRelease)
  FT_CU_BIND(cuCtxSetCurrent)
  FT_CU_BIND(cuCtxSynchronize)
  FT_CU_BIND(cuMemAlloc)
  FT_CU_BIND(cuMemFree)
  FT_CU_BIND(cuMemcpyHtoDAsync)
  FT_CU_BIND(cuMemcpyDtoHAsync)
  FT_CU_BIND(cuMemcpyDtoDAsync)
  FT_CU_BIND(cuMemsetD32Async)
  FT_CU_BIND(cuModuleLoadDataEx)
  FT_CU_BIND(cuModuleUnload)
  FT_CU_BIND(cuModuleGetFunction)
  FT_CU_BIND(cuFuncSetAttribute)
  FT_CU_BIND(cuLaunchKernel)
  FT_CU_BIND(cuStreamCreate)
  FT_CU_BIND(cuStreamDestroy)
  FT_CU_BIND(cuStreamSynchronize)
  FT_CU_BIND(cuEventCreate)
  FT_CU_BIND(cuEventDestroy)
  FT_CU_BIND(cuEventRecord)
  FT_CU_BIND(cuEventSynchronize)
  FT_CU_BIND(cuStreamBeginCapture)
  FT_CU_BIND(cuStreamEndCapture)
  FT_CU_BIND(cuGraphInstantiate)
  FT_CU_BIND(cuGraphLaunch)
  FT_CU_BIND(cuGraphExecDestroy)
  FT_CU_BIND(cuGraphDestroy)
  FT_CU_BIND(cuTensorMapEncodeTiled)
#undef FT_CU_BIND
  // cuEventElapsedTime_v2 (12.8+) has the old prototype; older drivers lack it.
  if (!api->lib.bind(api->cuEventElapsedTime, FT_CU_STR(cuEventElapsedTime)))
    need(api->cuEventElapsedTime, "cuEventElapsedTime");
  if (!missing.empty())
    return fail(Errc::device, fmt::format("{} lacks {} (the driver is too old; flytune needs CUDA >= 12)",
                                          api->lib.path(), missing));
  return api;
}

// The driver stays loaded for the process once opened: contexts, modules and
// device objects hold pointers into it, and unloading a GPU driver is not safe.
Result<std::shared_ptr<const CudaApi>> cuda_api() {
  static std::mutex mu;
  static std::shared_ptr<const CudaApi> api;
  std::lock_guard lock(mu);
  if (api) return api;
  const char* override_name = std::getenv("FLYTUNE_LIBCUDA");
  Result<DynLib> lib = override_name && *override_name
                           ? DynLib::open({override_name}, "NVIDIA driver")
                           : DynLib::open({"libcuda.so.1", "/usr/local/nvidia/lib64/libcuda.so.1",
                                           "/usr/lib/wsl/lib/libcuda.so.1"},
                                          "NVIDIA driver");
  if (!lib)
    return fail(Errc::no_device, fmt::format("{} not found (no NVIDIA driver)",
                                             override_name && *override_name ? override_name : "libcuda.so.1"));
  auto bound = bind_cuda_api(std::move(*lib));
  if (!bound) return std::unexpected(bound.error());
  api = std::move(*bound);
  return api;
}

// cuInit, then the number of GPUs; a missing GPU is Errc::no_device with the
// runtime's own words in `detail`.
struct CudaInit {
  int count = 0;
  bool no_gpu = false;  // the driver works but sees no GPU
  std::string problem, detail;
};

CudaInit init_cuda(const CudaApi& api) {
  CudaInit out;
  if (CUresult r = api.cuInit(0); r != CUDA_SUCCESS) {
    if (r == CUDA_ERROR_NO_DEVICE) {
      out.no_gpu = true;
      out.problem = "no NVIDIA GPU found";
      out.detail = "cuInit: " + api.name(r);
    } else {
      out.problem = runtime_call_message("cuInit", api.name(r), api.description(r));
    }
    return out;
  }
  if (CUresult r = api.cuDeviceGetCount(&out.count); r != CUDA_SUCCESS) {
    out.problem = runtime_call_message("cuDeviceGetCount", api.name(r), api.description(r));
    return out;
  }
  if (out.count == 0) {
    out.no_gpu = true;
    out.problem = "no NVIDIA GPU found";
    out.detail = "cuDeviceGetCount: 0";
  }
  return out;
}

Result<DeviceInfo> query_device(const CudaApi& api, int ordinal, const std::string& driver_version) {
  std::string ctx = fmt::format("cuda:{}", ordinal);
  CUdevice dev = 0;
  FT_CHECK(api.check("cuDeviceGet", api.cuDeviceGet(&dev, ordinal), ctx));
  auto attribute = [&](CUdevice_attribute a, const char* what) -> Result<int> {
    int v = 0;
    if (auto s = api.check("cuDeviceGetAttribute", api.cuDeviceGetAttribute(&v, a, dev), ctx + ": " + what); !s)
      return std::unexpected(s.error());
    return v;
  };
  DeviceInfo info;
  info.runtime = "cuda";
  info.ordinal = ordinal;
  char name[256] = {};
  FT_CHECK(api.check("cuDeviceGetName", api.cuDeviceGetName(name, sizeof name - 1, dev), ctx));
  info.name = name;
  int major = FT_TRY(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "compute capability"));
  int minor = FT_TRY(attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "compute capability"));
  info.arch = cuda_target_name(major, minor);
  info.compute_units = FT_TRY(attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count"));
  info.l2_bytes = std::size_t(FT_TRY(attribute(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size")));
  info.max_shared_per_block = FT_TRY(attribute(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "shared memory"));
  // Deprecated in CUDA 13 and may read 0 or fail there; the clock is advisory.
  int khz = 0;
  if (api.cuDeviceGetAttribute(&khz, CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev) == CUDA_SUCCESS) info.clock_mhz = khz / 1000;
  std::size_t bytes = 0;
  FT_CHECK(api.check("cuDeviceTotalMem", api.cuDeviceTotalMem(&bytes, dev), ctx));
  info.memory_bytes = bytes;
  char bus[64] = {};
  FT_CHECK(api.check("cuDeviceGetPCIBusId", api.cuDeviceGetPCIBusId(bus, sizeof bus - 1, dev), ctx));
  info.pci_bus_id = bus;
  int api_version = 0;
  FT_CHECK(api.check("cuDriverGetVersion", api.cuDriverGetVersion(&api_version), ctx));
  info.runtime_version = cuda_version_text(api_version);
  info.driver_version = driver_version.empty() ? info.runtime_version : driver_version;
  return info;
}

std::string driver_version_text() { return nvidia_driver_version().value_or(""); }

std::atomic<std::uint64_t> next_device_serial{1};
// Which device object's context this thread last made current (0: none), so a
// call only pays for cuCtxSetCurrent when the thread switches devices.
thread_local std::uint64_t current_device_serial = 0;

class CudaDevice final : public Device {
 public:
  CudaDevice(std::shared_ptr<const CudaApi> api, CUdevice dev, CUcontext ctx, DeviceInfo info)
      : api_(std::move(api)), dev_(dev), ctx_(ctx), info_(std::move(info)),
        where_(fmt::format("cuda:{}", info_.ordinal)), serial_(next_device_serial++) {}

  ~CudaDevice() override {
    if (current_device_serial == serial_) current_device_serial = 0;
    api_->cuDevicePrimaryCtxRelease(dev_);
  }

  const DeviceInfo& info() const override { return info_; }

  Result<DevicePtr> alloc(std::size_t bytes) override {
    if (bytes == 0) return fail(Errc::invalid_input, "cannot allocate 0 bytes", where_);
    FT_CHECK(make_current());
    CUdeviceptr p = 0;
    FT_CHECK(check("cuMemAlloc", api_->cuMemAlloc(&p, bytes), fmt::format("{} bytes", bytes)));
    return DevicePtr(p);
  }

  Status free(DevicePtr p) override {
    if (p == 0) return {};
    FT_CHECK(make_current());
    return check("cuMemFree", api_->cuMemFree(CUdeviceptr(p)));
  }

  Status copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle s) override {
    if (bytes == 0) return {};
    FT_CHECK(make_current());
    return check("cuMemcpyHtoDAsync", api_->cuMemcpyHtoDAsync(CUdeviceptr(dst), src, bytes, stream(s)));
  }

  Status copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle s) override {
    if (bytes == 0) return {};
    FT_CHECK(make_current());
    FT_CHECK(check("cuMemcpyDtoHAsync", api_->cuMemcpyDtoHAsync(dst, CUdeviceptr(src), bytes, stream(s))));
    return check("cuStreamSynchronize", api_->cuStreamSynchronize(stream(s)));
  }

  Status copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle s) override {
    if (bytes == 0) return {};
    FT_CHECK(make_current());
    return check("cuMemcpyDtoDAsync", api_->cuMemcpyDtoDAsync(CUdeviceptr(dst), CUdeviceptr(src), bytes, stream(s)));
  }

  Status memset_u32(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle s) override {
    if (count == 0) return {};
    FT_CHECK(make_current());
    return check("cuMemsetD32Async", api_->cuMemsetD32Async(CUdeviceptr(dst), value, count, stream(s)));
  }

  Result<ModuleHandle> load_module(std::span<const std::byte> image) override {
    if (image.empty()) return fail(Errc::invalid_input, "empty code object", where_);
    FT_CHECK(make_current());
    // The JIT error log says why a PTX image or a cubin for another GPU was refused.
    char log[4096] = {};
    CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* values[] = {log, reinterpret_cast<void*>(std::uintptr_t(sizeof log - 1))};
    CUmodule m = nullptr;
    CUresult r = api_->cuModuleLoadDataEx(&m, image.data(), 2, options, values);
    if (r != CUDA_SUCCESS) {
      Error e = runtime_call_error("cuModuleLoadData", api_->name(r), api_->description(r), where_);
      if (log[0]) e.message += fmt::format(" ({})", log);
      return std::unexpected(std::move(e));
    }
    return ModuleHandle{m};
  }

  Status unload_module(ModuleHandle m) override {
    if (!m.p) return {};
    FT_CHECK(make_current());
    return check("cuModuleUnload", api_->cuModuleUnload(CUmodule(m.p)));
  }

  Result<FunctionHandle> function(ModuleHandle m, const std::string& name) override {
    FT_CHECK(make_current());
    CUfunction f = nullptr;
    FT_CHECK(check("cuModuleGetFunction", api_->cuModuleGetFunction(&f, CUmodule(m.p), name.c_str()), name));
    return FunctionHandle{f};
  }

  Status set_dynamic_shared(FunctionHandle f, int bytes) override {
    if (bytes < 0 || bytes > info_.max_shared_per_block)
      return fail(Errc::device,
                  fmt::format("dynamic shared memory of {} bytes exceeds the {} bytes a block may use on {}", bytes,
                              info_.max_shared_per_block, info_.name),
                  where_);
    FT_CHECK(make_current());
    return check("cuFuncSetAttribute",
                 api_->cuFuncSetAttribute(CUfunction(f.p), CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, bytes));
  }

  // cuTensorMapEncodeTiled: a 2-D tiled map, the element type by its size (a
  // copy moves bits), zeros for elements outside the matrix, L2 lines of 128 bytes.
  Status encode_tensor_map(const TensorMapSpec& t, std::span<std::byte, kTensorMapBytes> out) override {
    if (auto why = why_bad_tensor_map(t)) return fail(Errc::invalid_input, *why, where_);
    const CUtensorMapDataType type = t.elem_bytes == 1   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                     : t.elem_bytes == 2 ? CU_TENSOR_MAP_DATA_TYPE_UINT16
                                                         : CU_TENSOR_MAP_DATA_TYPE_UINT32;
    const CUtensorMapSwizzle swizzle = t.swizzle == 128  ? CU_TENSOR_MAP_SWIZZLE_128B
                                       : t.swizzle == 64 ? CU_TENSOR_MAP_SWIZZLE_64B
                                       : t.swizzle == 32 ? CU_TENSOR_MAP_SWIZZLE_32B
                                                         : CU_TENSOR_MAP_SWIZZLE_NONE;
    const cuuint64_t dims[2] = {t.cols, t.rows}, strides[1] = {t.row_stride_bytes};
    const cuuint32_t box[2] = {t.box_cols, t.box_rows}, element_strides[2] = {1, 1};
    static_assert(sizeof(CUtensorMap) == kTensorMapBytes, "ft::TensorMap holds the driver's CUtensorMap");
    CUtensorMap map;
    FT_CHECK(check("cuTensorMapEncodeTiled",
                   api_->cuTensorMapEncodeTiled(&map, type, 2, reinterpret_cast<void*>(t.base), dims, strides, box,
                                                element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                                CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)));
    std::memcpy(out.data(), &map, sizeof map);
    return {};
  }

  Status launch(FunctionHandle f, Dim3 grid, Dim3 block, int dynamic_shared, StreamHandle s, const void* args,
                std::size_t args_size) override {
    FT_CHECK(make_current());
    // The kernels take one struct by value: kernelParams holds its address.
    void* params[] = {const_cast<void*>(args)};
    void** kernel_params = (args && args_size) ? params : nullptr;
    return check("cuLaunchKernel",
                 api_->cuLaunchKernel(CUfunction(f.p), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                      unsigned(dynamic_shared), stream(s), kernel_params, nullptr),
                 fmt::format("grid {}x{}x{}, block {}x{}x{}, {} bytes shared", grid.x, grid.y, grid.z, block.x,
                             block.y, block.z, dynamic_shared));
  }

  Result<StreamHandle> create_stream() override {
    FT_CHECK(make_current());
    CUstream st = nullptr;
    FT_CHECK(check("cuStreamCreate", api_->cuStreamCreate(&st, CU_STREAM_DEFAULT)));
    return StreamHandle{st};
  }

  Status destroy_stream(StreamHandle s) override {
    if (!s.p) return {};
    FT_CHECK(make_current());
    return check("cuStreamDestroy", api_->cuStreamDestroy(stream(s)));
  }

  Status synchronize(StreamHandle s) override {
    FT_CHECK(make_current());
    if (!s.p) return check("cuCtxSynchronize", api_->cuCtxSynchronize());
    return check("cuStreamSynchronize", api_->cuStreamSynchronize(stream(s)));
  }

  Result<EventHandle> create_event() override {
    FT_CHECK(make_current());
    CUevent e = nullptr;
    FT_CHECK(check("cuEventCreate", api_->cuEventCreate(&e, CU_EVENT_DEFAULT)));
    return EventHandle{e};
  }

  Status destroy_event(EventHandle e) override {
    if (!e.p) return {};
    FT_CHECK(make_current());
    return check("cuEventDestroy", api_->cuEventDestroy(CUevent(e.p)));
  }

  Status record(EventHandle e, StreamHandle s) override {
    FT_CHECK(make_current());
    return check("cuEventRecord", api_->cuEventRecord(CUevent(e.p), stream(s)));
  }

  Result<float> elapsed_ms(EventHandle start, EventHandle stop) override {
    FT_CHECK(make_current());
    FT_CHECK(check("cuEventSynchronize", api_->cuEventSynchronize(CUevent(stop.p))));
    float ms = 0;
    FT_CHECK(check("cuEventElapsedTime", api_->cuEventElapsedTime(&ms, CUevent(start.p), CUevent(stop.p))));
    return ms;
  }

  Status begin_capture(StreamHandle s) override {
    if (!s.p) return fail(Errc::invalid_input, "stream capture needs a created stream, not the default stream", where_);
    FT_CHECK(make_current());
    return check("cuStreamBeginCapture", api_->cuStreamBeginCapture(stream(s), CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  }

  Result<GraphHandle> end_capture(StreamHandle s) override {
    FT_CHECK(make_current());
    CUgraph graph = nullptr;
    FT_CHECK(check("cuStreamEndCapture", api_->cuStreamEndCapture(stream(s), &graph)));
    CUgraphExec exec = nullptr;
    CUresult r = api_->cuGraphInstantiate(&exec, graph, 0);
    // The executable graph is independent of the graph it came from.
    api_->cuGraphDestroy(graph);
    FT_CHECK(check("cuGraphInstantiate", r));
    return GraphHandle{exec};
  }

  Status launch_graph(GraphHandle g, StreamHandle s) override {
    FT_CHECK(make_current());
    return check("cuGraphLaunch", api_->cuGraphLaunch(CUgraphExec(g.p), stream(s)));
  }

  Status destroy_graph(GraphHandle g) override {
    if (!g.p) return {};
    FT_CHECK(make_current());
    return check("cuGraphExecDestroy", api_->cuGraphExecDestroy(CUgraphExec(g.p)));
  }

 private:
  static CUstream stream(StreamHandle s) { return CUstream(s.p); }

  Status check(const char* call, CUresult r, const std::string& what = {}) const {
    return api_->check(call, r, what.empty() ? where_ : where_ + ": " + what);
  }

  Status make_current() {
    if (current_device_serial == serial_) return {};
    FT_CHECK(check("cuCtxSetCurrent", api_->cuCtxSetCurrent(ctx_)));
    current_device_serial = serial_;
    return {};
  }

  std::shared_ptr<const CudaApi> api_;
  CUdevice dev_;
  CUcontext ctx_;
  DeviceInfo info_;
  std::string where_;  // "cuda:0", the context of every error
  std::uint64_t serial_;
};

}  // namespace

std::string cuda_target_name(int major, int minor) {
  // From Hopper on, flytune builds for the architecture-specific ("a") target.
  return fmt::format("sm_{}{}{}", major, minor, major >= 9 ? "a" : "");
}

std::string cuda_version_text(int version) { return fmt::format("{}.{}", version / 1000, (version % 1000) / 10); }

RuntimeReport probe_cuda() {
  RuntimeReport report;
  report.runtime = "cuda";
  auto api = cuda_api();
  if (!api) {
    report.problem = api.error().message;
    return report;
  }
  const CudaApi& a = **api;
  report.library = a.lib.path();
  int version = 0;
  if (a.cuDriverGetVersion(&version) == CUDA_SUCCESS) report.version = cuda_version_text(version);
  CudaInit init = init_cuda(a);
  if (!init.problem.empty()) {
    report.problem = init.problem;
    report.detail = init.detail;
    return report;
  }
  report.loaded = true;
  std::string driver = driver_version_text();
  if (!driver.empty()) report.version = fmt::format("{} (driver {})", report.version, driver);
  for (int i = 0; i < init.count; ++i) {
    auto info = query_device(a, i, driver);
    if (info) {
      report.devices.push_back(std::move(*info));
    } else {
      report.problem += (report.problem.empty() ? "" : "; ") + info.error().describe();
    }
  }
  return report;
}

Result<std::unique_ptr<Device>> open_cuda_device(int ordinal) {
  std::string where = fmt::format("cuda:{}", ordinal);
  auto api = cuda_api();
  if (!api) return std::unexpected(with_context(api.error(), where));
  const CudaApi& a = **api;
  CudaInit init = init_cuda(a);
  if (!init.problem.empty()) {
    std::string message = init.detail.empty() ? init.problem : fmt::format("{} ({})", init.problem, init.detail);
    return fail(init.no_gpu ? Errc::no_device : Errc::device, message, where);
  }
  if (ordinal < 0 || ordinal >= init.count)
    return fail(Errc::no_device,
                fmt::format("no such NVIDIA GPU: {} found (cuda:0{})", init.count,
                            init.count > 1 ? fmt::format(" .. cuda:{}", init.count - 1) : ""),
                where);
  DeviceInfo info = FT_TRY(query_device(a, ordinal, driver_version_text()));
  CUdevice dev = 0;
  FT_CHECK(a.check("cuDeviceGet", a.cuDeviceGet(&dev, ordinal), where));
  CUcontext ctx = nullptr;
  FT_CHECK(a.check("cuDevicePrimaryCtxRetain", a.cuDevicePrimaryCtxRetain(&ctx, dev), where));
  return std::unique_ptr<Device>(std::make_unique<CudaDevice>(*api, dev, ctx, std::move(info)));
}

}  // namespace ft
