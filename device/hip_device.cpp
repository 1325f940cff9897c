#include "device/hip_device.hpp"

#include <hip/hip_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include <fmt/format.h>

#include "device/call_error.hpp"
#include "system/dynlib.hpp"

namespace ft {
namespace {

// The header gives the types and enum values (the ones used here are the same
// in ROCm 5 and 6); the functions come from the library opened at run time.
struct HipApi {
  DynLib lib;
  const char* (*hipGetErrorName)(hipError_t) = nullptr;
  const char* (*hipGetErrorString)(hipError_t) = nullptr;
  hipError_t (*hipInit)(unsigned) = nullptr;
  hipError_t (*hipGetDeviceCount)(int*) = nullptr;
  hipError_t (*hipDriverGetVersion)(int*) = nullptr;
  hipError_t (*hipRuntimeGetVersion)(int*) = nullptr;
  hipError_t (*hipDeviceGetAttribute)(int*, hipDeviceAttribute_t, int) = nullptr;
  hipError_t (*hipDeviceGetName)(char*, int, hipDevice_t) = nullptr;
  hipError_t (*hipDeviceTotalMem)(std::size_t*, hipDevice_t) = nullptr;
  hipError_t (*hipDeviceGetPCIBusId)(char*, int, int) = nullptr;
  hipError_t (*hipGetDeviceProperties)(void*, int) = nullptr;  // layout differs by version
  hipError_t (*hipSetDevice)(int) = nullptr;
  hipError_t (*hipDeviceSynchronize)() = nullptr;
  hipError_t (*hipMalloc)(void**, std::size_t) = nullptr;
  hipError_t (*hipFree)(void*) = nullptr;
  hipError_t (*hipMemcpyHtoDAsync)(hipDeviceptr_t, void*, std::size_t, hipStream_t) = nullptr;
  hipError_t (*hipMemcpyDtoHAsync)(void*, hipDeviceptr_t, std::size_t, hipStream_t) = nullptr;
  hipError_t (*hipMemcpyDtoDAsync)(hipDeviceptr_t, hipDeviceptr_t, std::size_t, hipStream_t) = nullptr;
  hipError_t (*hipMemsetD32Async)(hipDeviceptr_t, int, std::size_t, hipStream_t) = nullptr;
  hipError_t (*hipModuleLoadData)(hipModule_t*, const void*) = nullptr;
  hipError_t (*hipModuleUnload)(hipModule_t) = nullptr;
  hipError_t (*hipModuleGetFunction)(hipFunction_t*, hipModule_t, const char*) = nullptr;
  hipError_t (*hipModuleLaunchKernel)(hipFunction_t, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      unsigned, hipStream_t, void**, void**) = nullptr;
  hipError_t (*hipStreamCreate)(hipStream_t*) = nullptr;
  hipError_t (*hipStreamDestroy)(hipStream_t) = nullptr;
  hipError_t (*hipStreamSynchronize)(hipStream_t) = nullptr;
  hipError_t (*hipEventCreate)(hipEvent_t*) = nullptr;
  hipError_t (*hipEventDestroy)(hipEvent_t) = nullptr;
  hipError_t (*hipEventRecord)(hipEvent_t, hipStream_t) = nullptr;
  hipError_t (*hipEventSynchronize)(hipEvent_t) = nullptr;
  hipError_t (*hipEventElapsedTime)(float*, hipEvent_t, hipEvent_t) = nullptr;
  hipError_t (*hipStreamBeginCapture)(hipStream_t, hipStreamCaptureMode) = nullptr;
  hipError_t (*hipStreamEndCapture)(hipStream_t, hipGraph_t*) = nullptr;
  hipError_t (*hipGraphInstantiate)(hipGraphExec_t*, hipGraph_t, hipGraphNode_t*, char*, std::size_t) = nullptr;
  hipError_t (*hipGraphLaunch)(hipGraphExec_t, hipStream_t) = nullptr;
  hipError_t (*hipGraphExecDestroy)(hipGraphExec_t) = nullptr;
  hipError_t (*hipGraphDestroy)(hipGraph_t) = nullptr;

  std::string name(hipError_t r) const {
    const char* s = hipGetErrorName(r);
    return s ? s : fmt::format("hipError_t {}", int(r));
  }
  std::string description(hipError_t r) const {
    const char* s = hipGetErrorString(r);
    return s ? s : "";
  }
  Status check(const char* call, hipError_t r, const std::string& context) const {
    if (r == hipSuccess) return {};
    return std::unexpected(runtime_call_error(call, name(r), description(r), context));
  }
};

Result<std::shared_ptr<HipApi>> bind_hip_api(DynLib lib) {
  auto api = std::make_shared<HipApi>();
  api->lib = std::move(lib);
  std::string missing;
  auto need = [&](auto& fn, const char* symbol) {
    if (!api->lib.bind(fn, symbol)) missing += (missing.empty() ? "" : ", ") + std::string(symbol);
  };
#define FT_HIP_BIND(fn) need(api->fn, #fn);
  FT_HIP_BIND(hipGetErrorName)
  FT_HIP_BIND(hipGetErrorString)
  FT_HIP_BIND(hipInit)
  FT_HIP_BIND(hipGetDeviceCount)
  FT_HIP_BIND(hipDriverGetVersion)
  FT_HIP_BIND(hipRuntimeGetVersion)
  FT_HIP_BIND(hipDeviceGetAttribute)
  FT_HIP_BIND(hipDeviceGetName)
  FT_HIP_BIND(hipDeviceTotalMem)
  FT_HIP_BIND(hipDeviceGetPCIBusId)
  FT_HIP_BIND(hipSetDevice)
  FT_HIP_BIND(hipDeviceSynchronize)
  FT_HIP_BIND(hipMalloc)
  FT_HIP_BIND(hipFree)
  FT_HIP_BIND(hipMemcpyHtoDAsync)
  FT_HIP_BIND(hipMemcpyDtoHAsync)
  FT_HIP_BIND(hipMemcpyDtoDAsync)
  FT_HIP_BIND(hipMemsetD32Async)
  FT_HIP_BIND(hipModuleLoadData)
  FT_HIP_BIND(hipModuleUnload)
  FT_HIP_BIND(hipModuleGetFunction)
  FT_HIP_BIND(hipModuleLaunchKernel)
  FT_HIP_BIND(hipStreamCreate)
  FT_HIP_BIND(hipStreamDestroy)
  FT_HIP_BIND(hipStreamSynchronize)
  FT_HIP_BIND(hipEventCreate)
  FT_HIP_BIND(hipEventDestroy)
  FT_HIP_BIND(hipEventRecord)
  FT_HIP_BIND(hipEventSynchronize)
  FT_HIP_BIND(hipEventElapsedTime)
  FT_HIP_BIND(hipStreamBeginCapture)
  FT_HIP_BIND(hipStreamEndCapture)
  FT_HIP_BIND(hipGraphInstantiate)
  FT_HIP_BIND(hipGraphLaunch)
  FT_HIP_BIND(hipGraphExecDestroy)
  FT_HIP_BIND(hipGraphDestroy)
#undef FT_HIP_BIND
  // ROCm 6 fills its new layout through the R0600 name; ROCm 5 has only the plain one.
  if (!api->lib.bind(api->hipGetDeviceProperties, "hipGetDevicePropertiesR0600"))
    need(api->hipGetDeviceProperties, "hipGetDeviceProperties");
  if (!missing.empty())
    return fail(Errc::device, fmt::format("{} lacks {} (flytune needs HIP from ROCm >= 5.2)", api->lib.path(), missing));
  return api;
}

// Loaded once and never unloaded (the HIP runtime does not survive dlclose).
Result<std::shared_ptr<const HipApi>> hip_api() {
  static std::mutex mu;
  static std::shared_ptr<const HipApi> api;
  std::lock_guard lock(mu);
  if (api) return api;
  const char* override_name = std::getenv("FLYTUNE_LIBHIP");
  Result<DynLib> lib = override_name && *override_name
                           ? DynLib::open({override_name}, "HIP runtime")
                           : DynLib::open({"libamdhip64.so.6", "libamdhip64.so.5", "/opt/rocm/lib/libamdhip64.so.6",
                                           "/opt/rocm/lib/libamdhip64.so.5"},
                                          "HIP runtime");
  if (!lib)
    return fail(Errc::no_device, fmt::format("{} not found (no ROCm HIP runtime)",
                                             override_name && *override_name ? override_name : "libamdhip64.so"));
  auto bound = bind_hip_api(std::move(*lib));
  if (!bound) return std::unexpected(bound.error());
  api = std::move(*bound);
  return api;
}

struct HipInit {
  int count = 0;
  bool no_gpu = false;
  std::string problem, detail;
};

HipInit init_hip(const HipApi& api) {
  HipInit out;
  // Without a GPU, hipInit fails (hipErrorInvalidDevice on ROCm 5.2) and
  // hipGetDeviceCount says hipErrorNoDevice: that answer is the one to report.
  hipError_t init = api.hipInit(0);
  hipError_t r = api.hipGetDeviceCount(&out.count);
  if (r == hipErrorNoDevice || (r == hipSuccess && out.count == 0)) {
    out.no_gpu = true;
    out.count = 0;
    out.problem = "no AMD GPU found";
    out.detail = r == hipSuccess ? "hipGetDeviceCount: 0" : "hipGetDeviceCount: " + api.name(r);
    return out;
  }
  if (r != hipSuccess) {
    out.count = 0;
    out.problem = runtime_call_message("hipGetDeviceCount", api.name(r), api.description(r));
    return out;
  }
  if (init != hipSuccess) {
    out.count = 0;
    out.problem = runtime_call_message("hipInit", api.name(init), api.description(init));
  }
  return out;
}

Result<DeviceInfo> query_device(const HipApi& api, int ordinal) {
  std::string ctx = fmt::format("hip:{}", ordinal);
  auto attribute = [&](hipDeviceAttribute_t a, const char* what) -> Result<int> {
    int v = 0;
    if (auto s = api.check("hipDeviceGetAttribute", api.hipDeviceGetAttribute(&v, a, ordinal), ctx + ": " + what); !s)
      return std::unexpected(s.error());
    return v;
  };
  DeviceInfo info;
  info.runtime = "hip";
  info.ordinal = ordinal;
  char name[256] = {};
  FT_CHECK(api.check("hipDeviceGetName", api.hipDeviceGetName(name, sizeof name - 1, ordinal), ctx));
  info.name = name;
  // 16 KiB: several times the largest hipDeviceProp_t layout (about 1.5 KiB).
  std::vector<std::byte> props(16384);
  FT_CHECK(api.check("hipGetDeviceProperties", api.hipGetDeviceProperties(props.data(), ordinal), ctx));
  std::string gcn = find_gcn_arch_name(props);
  if (gcn.empty()) return fail(Errc::device, "hipGetDeviceProperties gave no gcnArchName", ctx);
  info.arch = hip_target_name(gcn);
  info.compute_units = FT_TRY(attribute(hipDeviceAttributeMultiprocessorCount, "CU count"));
  info.l2_bytes = std::size_t(FT_TRY(attribute(hipDeviceAttributeL2CacheSize, "L2 size")));
  info.max_shared_per_block = FT_TRY(attribute(hipDeviceAttributeMaxSharedMemoryPerBlock, "LDS per block"));
  info.clock_mhz = FT_TRY(attribute(hipDeviceAttributeClockRate, "clock")) / 1000;
  std::size_t bytes = 0;
  FT_CHECK(api.check("hipDeviceTotalMem", api.hipDeviceTotalMem(&bytes, ordinal), ctx));
  info.memory_bytes = bytes;
  char bus[64] = {};
  FT_CHECK(api.check("hipDeviceGetPCIBusId", api.hipDeviceGetPCIBusId(bus, sizeof bus - 1, ordinal), ctx));
  info.pci_bus_id = bus;
  int v = 0;
  FT_CHECK(api.check("hipDriverGetVersion", api.hipDriverGetVersion(&v), ctx));
  info.driver_version = hip_version_text(v);
  FT_CHECK(api.check("hipRuntimeGetVersion", api.hipRuntimeGetVersion(&v), ctx));
  info.runtime_version = hip_version_text(v);
  return info;
}

std::atomic<std::uint64_t> next_device_serial{1};
thread_local std::uint64_t current_device_serial = 0;  // see cuda_device.cpp

class HipDevice final : public Device {
 public:
  HipDevice(std::shared_ptr<const HipApi> api, DeviceInfo info)
      : api_(std::move(api)), info_(std::move(info)), where_(fmt::format("hip:{}", info_.ordinal)),
        serial_(next_device_serial++) {}

  ~HipDevice() override {
    if (current_device_serial == serial_) current_device_serial = 0;
  }

  const DeviceInfo& info() const override { return info_; }

  Result<DevicePtr> alloc(std::size_t bytes) override {
    if (bytes == 0) return fail(Errc::invalid_input, "cannot allocate 0 bytes", where_);
    FT_CHECK(make_current());
    void* p = nullptr;
    FT_CHECK(check("hipMalloc", api_->hipMalloc(&p, bytes), fmt::format("{} bytes", bytes)));
    return DevicePtr(reinterpret_cast<std::uintptr_t>(p));
  }

  Status free(DevicePtr p) override {
    if (p == 0) return {};
    FT_CHECK(make_current());
    return check("hipFree", api_->hipFree(ptr(p)));
  }

  Status copy_to_device(DevicePtr dst, const void* src, std::size_t bytes, StreamHandle s) override {
    if (bytes == 0) return {};
    FT_CHECK(make_current());
    return check("hipMemcpyHtoDAsync", api_->hipMemcpyHtoDAsync(ptr(dst), const_cast<void*>(src), bytes, stream(s)));
  }

  Status copy_to_host(void* dst, DevicePtr src, std::size_t bytes, StreamHandle s) override {
    if (bytes == 0) return {};
    FT_CHECK(make_current());
    FT_CHECK(check("hipMemcpyDtoHAsync", api_->hipMemcpyDtoHAsync(dst, ptr(src), bytes, stream(s))));
    return check("hipStreamSynchronize", api_->hipStreamSynchronize(stream(s)));
  }

  Status copy_device(DevicePtr dst, DevicePtr src, std::size_t bytes, StreamHandle s) override {
    if (bytes == 0) return {};
    FT_CHECK(make_current());
    return check("hipMemcpyDtoDAsync", api_->hipMemcpyDtoDAsync(ptr(dst), ptr(src), bytes, stream(s)));
  }

  Status memset_u32(DevicePtr dst, std::uint32_t value, std::size_t count, StreamHandle s) override {
    if (count == 0) return {};
    FT_CHECK(make_current());
    return check("hipMemsetD32Async", api_->hipMemsetD32Async(ptr(dst), int(value), count, stream(s)));
  }

  Result<ModuleHandle> load_module(std::span<const std::byte> image) override {
    if (image.empty()) return fail(Errc::invalid_input, "empty code object", where_);
    FT_CHECK(make_current());
    hipModule_t m = nullptr;
    FT_CHECK(check("hipModuleLoadData", api_->hipModuleLoadData(&m, image.data())));
    return ModuleHandle{m};
  }

  Status unload_module(ModuleHandle m) override {
    if (!m.p) return {};
    FT_CHECK(make_current());
    return check("hipModuleUnload", api_->hipModuleUnload(hipModule_t(m.p)));
  }

  Result<FunctionHandle> function(ModuleHandle m, const std::string& name) override {
    FT_CHECK(make_current());
    hipFunction_t f = nullptr;
    FT_CHECK(check("hipModuleGetFunction", api_->hipModuleGetFunction(&f, hipModule_t(m.p), name.c_str()), name));
    return FunctionHandle{f};
  }

  Status set_dynamic_shared(FunctionHandle, int bytes) override {
    if (bytes < 0 || bytes > info_.max_shared_per_block)
      return fail(Errc::device,
                  fmt::format("dynamic LDS of {} bytes exceeds the {} bytes a block may use on {}", bytes,
                              info_.max_shared_per_block, info_.arch),
                  where_);
    return {};
  }

  Status launch(FunctionHandle f, Dim3 grid, Dim3 block, int dynamic_shared, StreamHandle s, const void* args,
                std::size_t args_size) override {
    FT_CHECK(make_current());
    // The argument bytes go with their size (extra), not as a pointer whose
    // size the runtime takes from the code object's metadata: a runtime that
    // checks it (the HIP test double) sees a host struct of the wrong size.
    std::size_t size = args_size;
    void* extra[] = {HIP_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(args), HIP_LAUNCH_PARAM_BUFFER_SIZE, &size,
                     HIP_LAUNCH_PARAM_END};
    void** kernel_extra = (args && args_size) ? extra : nullptr;
    return check("hipModuleLaunchKernel",
                 api_->hipModuleLaunchKernel(hipFunction_t(f.p), grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                             unsigned(dynamic_shared), stream(s), nullptr, kernel_extra),
                 fmt::format("grid {}x{}x{}, block {}x{}x{}, {} bytes LDS", grid.x, grid.y, grid.z, block.x, block.y,
                             block.z, dynamic_shared));
  }

  Result<StreamHandle> create_stream() override {
    FT_CHECK(make_current());
    hipStream_t st = nullptr;
    FT_CHECK(check("hipStreamCreate", api_->hipStreamCreate(&st)));
    return StreamHandle{st};
  }

  Status destroy_stream(StreamHandle s) override {
    if (!s.p) return {};
    FT_CHECK(make_current());
    return check("hipStreamDestroy", api_->hipStreamDestroy(stream(s)));
  }

  Status synchronize(StreamHandle s) override {
    FT_CHECK(make_current());
    if (!s.p) return check("hipDeviceSynchronize", api_->hipDeviceSynchronize());
    return check("hipStreamSynchronize", api_->hipStreamSynchronize(stream(s)));
  }

  Result<EventHandle> create_event() override {
    FT_CHECK(make_current());
    hipEvent_t e = nullptr;
    FT_CHECK(check("hipEventCreate", api_->hipEventCreate(&e)));
    return EventHandle{e};
  }

  Status destroy_event(EventHandle e) override {
    if (!e.p) return {};
    FT_CHECK(make_current());
    return check("hipEventDestroy", api_->hipEventDestroy(hipEvent_t(e.p)));
  }

  Status record(EventHandle e, StreamHandle s) override {
    FT_CHECK(make_current());
    return check("hipEventRecord", api_->hipEventRecord(hipEvent_t(e.p), stream(s)));
  }

  Result<float> elapsed_ms(EventHandle start, EventHandle stop) override {
    FT_CHECK(make_current());
    FT_CHECK(check("hipEventSynchronize", api_->hipEventSynchronize(hipEvent_t(stop.p))));
    float ms = 0;
    FT_CHECK(check("hipEventElapsedTime", api_->hipEventElapsedTime(&ms, hipEvent_t(start.p), hipEvent_t(stop.p))));
    return ms;
  }

  Status begin_capture(StreamHandle s) override {
    if (!s.p) return fail(Errc::invalid_input, "stream capture needs a created stream, not the default stream", where_);
    FT_CHECK(make_current());
    return check("hipStreamBeginCapture", api_->hipStreamBeginCapture(stream(s), hipStreamCaptureModeThreadLocal));
  }

  Result<GraphHandle> end_capture(StreamHandle s) override {
    FT_CHECK(make_current());
    hipGraph_t graph = nullptr;
    FT_CHECK(check("hipStreamEndCapture", api_->hipStreamEndCapture(stream(s), &graph)));
    hipGraphExec_t exec = nullptr;
    hipError_t r = api_->hipGraphInstantiate(&exec, graph, nullptr, nullptr, 0);
    (void)api_->hipGraphDestroy(graph);
    FT_CHECK(check("hipGraphInstantiate", r));
    return GraphHandle{exec};
  }

  Status launch_graph(GraphHandle g, StreamHandle s) override {
    FT_CHECK(make_current());
    return check("hipGraphLaunch", api_->hipGraphLaunch(hipGraphExec_t(g.p), stream(s)));
  }

  Status destroy_graph(GraphHandle g) override {
    if (!g.p) return {};
    FT_CHECK(make_current());
    return check("hipGraphExecDestroy", api_->hipGraphExecDestroy(hipGraphExec_t(g.p)));
  }

 private:
  static hipStream_t stream(StreamHandle s) { return hipStream_t(s.p); }
  static hipDeviceptr_t ptr(DevicePtr p) { return reinterpret_cast<hipDeviceptr_t>(std::uintptr_t(p)); }

  Status check(const char* call, hipError_t r, const std::string& what = {}) const {
    return api_->check(call, r, what.empty() ? where_ : where_ + ": " + what);
  }

  Status make_current() {
    if (current_device_serial == serial_) return {};
    FT_CHECK(check("hipSetDevice", api_->hipSetDevice(info_.ordinal)));
    current_device_serial = serial_;
    return {};
  }

  std::shared_ptr<const HipApi> api_;
  DeviceInfo info_;
  std::string where_;
  std::uint64_t serial_;
};

}  // namespace

std::string hip_target_name(std::string_view gcn_arch_name) {
  return std::string(gcn_arch_name.substr(0, gcn_arch_name.find(':')));
}

std::string hip_version_text(int version) {
  return fmt::format("{}.{}.{}", version / 10'000'000, (version / 100'000) % 100, version % 100'000);
}

std::string find_gcn_arch_name(std::span<const std::byte> props) {
  auto at = [&](std::size_t i) { return char(props[i]); };
  auto arch_char = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == ':' || c == '+' || c == '-';
  };
  // A NUL-terminated string that begins "gfx" right after a NUL (or at the
  // start) and holds only the characters an arch name has.
  for (std::size_t i = 0; i + 4 <= props.size(); ++i) {
    if ((i > 0 && at(i - 1) != '\0') || at(i) != 'g' || at(i + 1) != 'f' || at(i + 2) != 'x') continue;
    std::size_t end = i;
    while (end < props.size() && end - i < 256 && arch_char(at(end))) ++end;
    if (end < props.size() && at(end) == '\0' && end - i > 3) {
      std::string s(end - i, '\0');
      for (std::size_t k = i; k < end; ++k) s[k - i] = at(k);
      return s;
    }
  }
  return {};
}

RuntimeReport probe_hip() {
  RuntimeReport report;
  report.runtime = "hip";
  auto api = hip_api();
  if (!api) {
    report.problem = api.error().message;
    return report;
  }
  const HipApi& a = **api;
  report.library = a.lib.path();
  int version = 0;
  if (a.hipRuntimeGetVersion(&version) == hipSuccess) report.version = hip_version_text(version);
  HipInit init = init_hip(a);
  if (!init.problem.empty()) {
    report.problem = init.problem;
    report.detail = init.detail;
    return report;
  }
  report.loaded = true;
  for (int i = 0; i < init.count; ++i) {
    auto info = query_device(a, i);
    if (info) {
      report.devices.push_back(std::move(*info));
    } else {
      report.problem += (report.problem.empty() ? "" : "; ") + info.error().describe();
    }
  }
  return report;
}

Result<std::unique_ptr<Device>> open_hip_device(int ordinal) {
  std::string where = fmt::format("hip:{}", ordinal);
  auto api = hip_api();
  if (!api) return std::unexpected(with_context(api.error(), where));
  const HipApi& a = **api;
  HipInit init = init_hip(a);
  if (!init.problem.empty()) {
    std::string message = init.detail.empty() ? init.problem : fmt::format("{} ({})", init.problem, init.detail);
    return fail(init.no_gpu ? Errc::no_device : Errc::device, message, where);
  }
  if (ordinal < 0 || ordinal >= init.count)
    return fail(Errc::no_device,
                fmt::format("no such AMD GPU: {} found (hip:0{})", init.count,
                            init.count > 1 ? fmt::format(" .. hip:{}", init.count - 1) : ""),
                where);
  DeviceInfo info = FT_TRY(query_device(a, ordinal));
  auto device = std::make_unique<HipDevice>(*api, std::move(info));
  return std::unique_ptr<Device>(std::move(device));
}

}  // namespace ft
