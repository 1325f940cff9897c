// The CUDA backend on a real NVIDIA GPU: query, memory, a kernel compiled by
// NVRTC here and launched with one by-value struct, dynamic shared memory
// above 48 KiB, events, graph capture and replay, and failed calls that name
// the call and the CUDA error. Without a GPU every test is skipped with why.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "generator/target.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "device/cuda_device.hpp"
#include "device/runtimes.hpp"
#include "device/telemetry.hpp"

namespace ft {
namespace {

constexpr const char* kTestKernels = R"(
struct FillArgs {
  float* out;
  unsigned n;
  float scale;
  float offset;
};
extern "C" __global__ void ft_test_fill(FillArgs a) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < a.n) a.out[i] = a.scale * float(i) + a.offset;
}

// Every value goes through dynamic shared memory, reversed: right only when
// the launch really got `words` floats of it.
struct ReverseArgs {
  const float* in;
  float* out;
  unsigned words;
};
extern "C" __global__ void ft_test_reverse_through_shared(ReverseArgs a) {
  extern __shared__ float stage[];
  for (unsigned i = threadIdx.x; i < a.words; i += blockDim.x) stage[i] = a.in[i];
  __syncthreads();
  for (unsigned i = threadIdx.x; i < a.words; i += blockDim.x) a.out[i] = stage[a.words - 1 - i];
}
)";

// The host images of the kernels' argument structs (same layout: 8-byte
// pointers first, then 4-byte fields).
struct FillArgs {
  DevicePtr out;
  std::uint32_t n;
  float scale;
  float offset;
};
static_assert(sizeof(FillArgs) == 24);

struct ReverseArgs {
  DevicePtr in;
  DevicePtr out;
  std::uint32_t words;
};
static_assert(sizeof(ReverseArgs) == 24);

constexpr std::uint32_t kQuietNaN = 0x7FC00000u;  // poison: unwritten outputs fail

class CudaGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RuntimeReport report = probe_cuda();
    if (report.devices.empty()) {
      skip_reason_ = test::no_gpu_reason(report);
      return;
    }
    auto dev = open_cuda_device(0);
    if (!dev) {
      open_error_ = dev.error().describe();
      return;
    }
    device_ = std::move(*dev);
  }
  static void TearDownTestSuite() { device_.reset(); }

  void SetUp() override {
    if (!skip_reason_.empty()) {
      GTEST_SKIP() << "skipped: no GPU (" << skip_reason_ << ")";
    }
    ASSERT_TRUE(device_) << "a GPU is present but cannot be opened: " << open_error_;
  }

  // The test kernels, compiled once per process for this GPU.
  ModuleHandle module() {
    if (!module_.p) {
      auto cubin = test::nvrtc_compile(kTestKernels, device_->info().arch);
      EXPECT_TRUE(cubin) << cubin.error().describe();
      if (!cubin) return {};
      auto m = device_->load_module(*cubin);
      EXPECT_TRUE(m) << m.error().describe();
      if (m) module_ = *m;
    }
    return module_;
  }

  FunctionHandle kernel(const char* name) {
    auto f = device_->function(module(), name);
    EXPECT_TRUE(f) << f.error().describe();
    return f ? *f : FunctionHandle{};
  }

  std::vector<float> read(DevicePtr p, std::size_t n) {
    std::vector<float> out(n);
    auto s = device_->copy_to_host(out.data(), p, n * sizeof(float));
    EXPECT_TRUE(s) << s.error().describe();
    return out;
  }

  // Counts elements that differ from scale * i + offset (NaN never matches).
  static std::size_t fill_mismatches(const std::vector<float>& v, float scale, float offset) {
    std::size_t bad = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (!(v[i] == scale * float(i) + offset)) ++bad;
    return bad;
  }

  static inline std::unique_ptr<Device> device_;
  static inline std::string skip_reason_, open_error_;
  static inline ModuleHandle module_;
};

TEST_F(CudaGpu, QueryDescribesTheGpu) {
  const DeviceInfo& d = device_->info();
  EXPECT_EQ(d.runtime, "cuda");
  EXPECT_EQ(d.ordinal, 0);
  EXPECT_FALSE(d.name.empty());
  EXPECT_EQ(d.arch.rfind("sm_", 0), 0u) << d.arch;
  EXPECT_GT(d.compute_units, 0);
  EXPECT_GT(d.memory_bytes, std::size_t(1) << 30);
  EXPECT_GT(d.l2_bytes, 0u);
  EXPECT_GE(d.max_shared_per_block, 48 * 1024);
  EXPECT_FALSE(d.pci_bus_id.empty());
  EXPECT_FALSE(d.driver_version.empty());
  EXPECT_FALSE(d.runtime_version.empty());
  if (d.name.find("H200") != std::string::npos || d.name.find("H100") != std::string::npos) {
    EXPECT_EQ(d.arch, "sm_90a");
    EXPECT_EQ(d.max_shared_per_block, 232448);  // 227 KiB with the opt-in
    EXPECT_GE(d.compute_units, 114);
  }
  // The target row's LDS column is the driver's own opt-in maximum.
  if (const Target* t = find_target(d.arch)) {
    EXPECT_EQ(d.max_shared_per_block, t->lds_bytes) << "generator/targets.def: " << t->name << " lds_bytes";
  }
  std::printf("%s: %s %s, %d SMs, %.1f GiB, L2 %zu KiB, shared %d KiB, driver %s, CUDA %s, PCI %s\n",
              device_selector(d).c_str(), d.name.c_str(), d.arch.c_str(), d.compute_units,
              d.memory_bytes / 1073741824.0, d.l2_bytes / 1024, d.max_shared_per_block / 1024,
              d.driver_version.c_str(), d.runtime_version.c_str(), d.pci_bus_id.c_str());
}

TEST_F(CudaGpu, CopiesAndMemsetRoundTrip) { test::check_copies_and_memset(*device_); }

TEST_F(CudaGpu, LaunchWithStructArgumentWritesBuffer) {
  FunctionHandle fill = kernel("ft_test_fill");
  ASSERT_TRUE(fill.p);
  constexpr std::uint32_t n = 1000003;  // not a multiple of the block
  auto out = device_->alloc(n * sizeof(float));
  ASSERT_TRUE(out) << out.error().describe();
  ASSERT_TRUE(device_->memset_u32(*out, kQuietNaN, n));
  FillArgs args{*out, n, 0.5f, 3.0f};
  auto s = device_->launch(fill, {(n + 255) / 256}, {256}, 0, {}, &args, sizeof args);
  ASSERT_TRUE(s) << s.error().describe();
  ASSERT_TRUE(device_->synchronize());
  EXPECT_EQ(fill_mismatches(read(*out, n), 0.5f, 3.0f), 0u);
  EXPECT_TRUE(device_->free(*out));
}

TEST_F(CudaGpu, DynamicSharedMemoryAbove48KiB) {
  FunctionHandle reverse = kernel("ft_test_reverse_through_shared");
  ASSERT_TRUE(reverse.p);
  constexpr std::uint32_t words = 50 * 1024;  // 200 KiB of shared memory
  const int bytes = int(words * sizeof(float));
  ASSERT_LE(bytes, device_->info().max_shared_per_block);
  std::vector<float> host(words);
  for (std::uint32_t i = 0; i < words; ++i) host[i] = float(i);
  auto in = device_->alloc(bytes);
  auto out = device_->alloc(bytes);
  ASSERT_TRUE(in && out);
  ASSERT_TRUE(device_->copy_to_device(*in, host.data(), bytes));
  ASSERT_TRUE(device_->memset_u32(*out, kQuietNaN, words));
  ReverseArgs args{*in, *out, words};
  // Without the opt-in the launch must fail: this is what set_dynamic_shared is for.
  auto refused = device_->launch(reverse, {1}, {512}, bytes, {}, &args, sizeof args);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("cuLaunchKernel failed: CUDA_ERROR_"), std::string::npos)
      << refused.error().describe();
  auto s = device_->set_dynamic_shared(reverse, bytes);
  ASSERT_TRUE(s) << s.error().describe();
  s = device_->launch(reverse, {1}, {512}, bytes, {}, &args, sizeof args);
  ASSERT_TRUE(s) << s.error().describe();
  std::vector<float> got = read(*out, words);
  std::size_t bad = 0;
  for (std::uint32_t i = 0; i < words; ++i) bad += !(got[i] == float(words - 1 - i));
  EXPECT_EQ(bad, 0u);
  EXPECT_FALSE(device_->set_dynamic_shared(reverse, device_->info().max_shared_per_block + 1));
  EXPECT_TRUE(device_->free(*in));
  EXPECT_TRUE(device_->free(*out));
}

TEST_F(CudaGpu, EventsTimeALaunch) {
  FunctionHandle fill = kernel("ft_test_fill");
  ASSERT_TRUE(fill.p);
  constexpr std::uint32_t n = 64u << 20;  // 256 MiB written: well past launch overhead
  auto out = device_->alloc(std::size_t(n) * sizeof(float));
  ASSERT_TRUE(out);
  auto stream = device_->create_stream();
  auto start = device_->create_event();
  auto stop = device_->create_event();
  ASSERT_TRUE(stream && start && stop);
  FillArgs args{*out, n, 1.0f, 0.0f};
  ASSERT_TRUE(device_->launch(fill, {n / 256}, {256}, 0, *stream, &args, sizeof args));  // warm-up
  ASSERT_TRUE(device_->record(*start, *stream));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(device_->launch(fill, {n / 256}, {256}, 0, *stream, &args, sizeof args));
  ASSERT_TRUE(device_->record(*stop, *stream));
  auto ms = device_->elapsed_ms(*start, *stop);
  ASSERT_TRUE(ms) << ms.error().describe();
  EXPECT_TRUE(std::isfinite(*ms));
  EXPECT_GT(*ms, 0.0f);
  EXPECT_LT(*ms, 10000.0f);
  double gbps = 10.0 * n * sizeof(float) / (*ms * 1e-3) / 1e9;
  std::printf("10 fills of %u floats: %.3f ms (%.0f GB/s written)\n", n, *ms, gbps);
  EXPECT_TRUE(device_->destroy_event(*start));
  EXPECT_TRUE(device_->destroy_event(*stop));
  EXPECT_TRUE(device_->destroy_stream(*stream));
  EXPECT_TRUE(device_->free(*out));
}

TEST_F(CudaGpu, CapturedGraphReplaysTheLaunch) {
  FunctionHandle fill = kernel("ft_test_fill");
  ASSERT_TRUE(fill.p);
  constexpr std::uint32_t n = 1 << 20;
  auto out = device_->alloc(n * sizeof(float));
  auto stream = device_->create_stream();
  ASSERT_TRUE(out && stream);
  FillArgs args{*out, n, 2.0f, 7.0f};
  ASSERT_TRUE(device_->memset_u32(*out, 0, n, *stream));
  ASSERT_TRUE(device_->synchronize(*stream));
  auto s = device_->begin_capture(*stream);
  ASSERT_TRUE(s) << s.error().describe();
  ASSERT_TRUE(device_->memset_u32(*out, kQuietNaN, n, *stream));
  ASSERT_TRUE(device_->launch(fill, {n / 256}, {256}, 0, *stream, &args, sizeof args));
  auto graph = device_->end_capture(*stream);
  ASSERT_TRUE(graph) << graph.error().describe();
  // Capture records work without running it: the buffer still holds zeros.
  EXPECT_EQ(fill_mismatches(read(*out, n), 0.0f, 0.0f), 0u);
  // The arguments were captured by value: changing them now changes nothing.
  args.offset = -1.0f;
  ASSERT_TRUE(device_->launch_graph(*graph, *stream));
  EXPECT_EQ(fill_mismatches(read(*out, n), 2.0f, 7.0f), 0u);

  auto start = device_->create_event();
  auto stop = device_->create_event();
  ASSERT_TRUE(start && stop);
  constexpr int replays = 100;
  ASSERT_TRUE(device_->record(*start, *stream));
  for (int i = 0; i < replays; ++i) ASSERT_TRUE(device_->launch_graph(*graph, *stream));
  ASSERT_TRUE(device_->record(*stop, *stream));
  auto ms = device_->elapsed_ms(*start, *stop);
  ASSERT_TRUE(ms) << ms.error().describe();
  EXPECT_GT(*ms, 0.0f);
  std::printf("graph replay (memset + fill of %u floats): %.4f ms each\n", n, *ms / replays);
  EXPECT_EQ(fill_mismatches(read(*out, n), 2.0f, 7.0f), 0u);
  EXPECT_TRUE(device_->destroy_graph(*graph));
  EXPECT_TRUE(device_->destroy_event(*start));
  EXPECT_TRUE(device_->destroy_event(*stop));
  EXPECT_TRUE(device_->destroy_stream(*stream));
  EXPECT_TRUE(device_->free(*out));
}

TEST_F(CudaGpu, FailedCallsNameTheCallAndError) {
  auto f = device_->function(module(), "ft_no_such_kernel");
  ASSERT_FALSE(f);
  EXPECT_EQ(f.error().code, Errc::device);
  EXPECT_EQ(f.error().context, "cuda:0: ft_no_such_kernel");
  EXPECT_EQ(f.error().message.rfind("cuModuleGetFunction failed: CUDA_ERROR_NOT_FOUND: ", 0), 0u) << f.error().message;

  std::vector<std::byte> garbage(256, std::byte{0x5a});
  garbage.back() = std::byte{0};  // the driver may read it as PTX text
  auto m = device_->load_module(garbage);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message.rfind("cuModuleLoadData failed: CUDA_ERROR_", 0), 0u) << m.error().describe();

  auto huge = device_->alloc(std::size_t(1) << 50);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().message.rfind("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY", 0), 0u)
      << huge.error().describe();

  FunctionHandle fill = kernel("ft_test_fill");
  FillArgs args{0, 0, 0, 0};
  auto too_wide = device_->launch(fill, {1}, {4096}, 0, {}, &args, sizeof args);
  ASSERT_FALSE(too_wide);
  EXPECT_EQ(too_wide.error().message.rfind("cuLaunchKernel failed: CUDA_ERROR_INVALID_VALUE", 0), 0u)
      << too_wide.error().describe();

  auto capture = device_->begin_capture({});
  ASSERT_FALSE(capture);
  EXPECT_EQ(capture.error().code, Errc::invalid_input);
  // The device is still usable after the failures.
  test::check_copies_and_memset(*device_);
}

TEST_F(CudaGpu, OpenDeviceBySelector) {
  auto first = open_device("");
  ASSERT_TRUE(first) << first.error().describe();
  auto by_name = open_device("cuda:0");
  ASSERT_TRUE(by_name) << by_name.error().describe();
  EXPECT_EQ((*by_name)->info().pci_bus_id, device_->info().pci_bus_id);
  auto absent = open_device("cuda:4096");
  ASSERT_FALSE(absent);
  EXPECT_EQ(absent.error().code, Errc::no_device);
}

TEST_F(CudaGpu, TelemetryReadsClocks) {
  Telemetry t = Telemetry::open(device_->info());
  ASSERT_TRUE(t.available()) << t.problem();
  TelemetryReading r = t.read();
  ASSERT_TRUE(r.sm_clock_mhz && r.memory_clock_mhz && r.temperature_c);
  EXPECT_GT(*r.sm_clock_mhz, 0);
  EXPECT_GT(*r.memory_clock_mhz, 0);
  EXPECT_GT(*r.temperature_c, 0.0);
  EXPECT_LT(*r.temperature_c, 120.0);
  std::printf("telemetry (%s): SM %d MHz, memory %d MHz, %.0f C, power %s\n", t.library().c_str(), *r.sm_clock_mhz,
              *r.memory_clock_mhz, *r.temperature_c,
              r.power_w ? fmt::format("{:.0f} W", *r.power_w).c_str() : "unreadable");
}

}  // namespace
}  // namespace ft
