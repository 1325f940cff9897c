// The HIP backend on a real AMD GPU: query, memory, events, and a captured
// graph. (Kernels need a code object for the GPU's ISA; the kernel tests that
// compile one live with the AMD compile path.) Without an AMD GPU every test
// is skipped with the runtime's reason.
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <gtest/gtest.h>

#include "generator/target.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "device/hip_device.hpp"
#include "device/runtimes.hpp"

namespace ft {
namespace {

class HipGpu : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RuntimeReport report = probe_hip();
    if (report.devices.empty()) {
      skip_reason_ = test::no_gpu_reason(report);
      return;
    }
    auto dev = open_hip_device(0);
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
    ASSERT_TRUE(device_) << "an AMD GPU is present but cannot be opened: " << open_error_;
  }

  static inline std::unique_ptr<Device> device_;
  static inline std::string skip_reason_, open_error_;
};

TEST_F(HipGpu, QueryDescribesTheGpu) {
  const DeviceInfo& d = device_->info();
  EXPECT_EQ(d.runtime, "hip");
  EXPECT_EQ(d.arch.rfind("gfx", 0), 0u) << d.arch;
  EXPECT_EQ(d.arch.find(':'), std::string::npos) << d.arch;
  EXPECT_GT(d.compute_units, 0);
  EXPECT_GT(d.memory_bytes, std::size_t(1) << 30);
  EXPECT_GE(d.max_shared_per_block, 64 * 1024);
  if (const Target* t = find_target(d.arch)) {
    EXPECT_EQ(d.max_shared_per_block, t->lds_bytes) << d.arch;
  }
  std::printf("%s: %s %s, %d CUs, %.1f GiB, driver %s, HIP %s, PCI %s\n", device_selector(d).c_str(), d.name.c_str(),
              d.arch.c_str(), d.compute_units, d.memory_bytes / 1073741824.0, d.driver_version.c_str(),
              d.runtime_version.c_str(), d.pci_bus_id.c_str());
}

TEST_F(HipGpu, CopiesAndMemsetRoundTrip) { test::check_copies_and_memset(*device_); }

TEST_F(HipGpu, CapturedGraphReplaysAndEventsTimeIt) {
  constexpr std::size_t n = 1 << 20;
  auto buf = device_->alloc(n * 4);
  auto stream = device_->create_stream();
  auto start = device_->create_event();
  auto stop = device_->create_event();
  ASSERT_TRUE(buf && stream && start && stop);
  ASSERT_TRUE(device_->memset_u32(*buf, 0, n, *stream));
  ASSERT_TRUE(device_->synchronize(*stream));
  auto s = device_->begin_capture(*stream);
  ASSERT_TRUE(s) << s.error().describe();
  ASSERT_TRUE(device_->memset_u32(*buf, 0x01020304u, n, *stream));
  auto graph = device_->end_capture(*stream);
  ASSERT_TRUE(graph) << graph.error().describe();
  std::vector<std::uint32_t> host(n, 1);
  ASSERT_TRUE(device_->copy_to_host(host.data(), *buf, n * 4, *stream));
  EXPECT_EQ(std::count(host.begin(), host.end(), 0u), std::ptrdiff_t(n));  // capture ran nothing
  ASSERT_TRUE(device_->record(*start, *stream));
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(device_->launch_graph(*graph, *stream));
  ASSERT_TRUE(device_->record(*stop, *stream));
  auto ms = device_->elapsed_ms(*start, *stop);
  ASSERT_TRUE(ms) << ms.error().describe();
  EXPECT_TRUE(std::isfinite(*ms) && *ms > 0.0f);
  ASSERT_TRUE(device_->copy_to_host(host.data(), *buf, n * 4, *stream));
  EXPECT_EQ(std::count(host.begin(), host.end(), 0x01020304u), std::ptrdiff_t(n));
  EXPECT_TRUE(device_->destroy_graph(*graph));
  EXPECT_TRUE(device_->destroy_event(*start));
  EXPECT_TRUE(device_->destroy_event(*stop));
  EXPECT_TRUE(device_->destroy_stream(*stream));
  EXPECT_TRUE(device_->free(*buf));
}

TEST_F(HipGpu, FailedCallsNameTheCallAndError) {
  auto huge = device_->alloc(std::size_t(1) << 50);
  ASSERT_FALSE(huge);
  EXPECT_EQ(huge.error().code, Errc::device);
  EXPECT_EQ(huge.error().message.rfind("hipMalloc failed: hipError", 0), 0u) << huge.error().describe();
  std::vector<std::byte> garbage(256, std::byte{0x5a});
  auto m = device_->load_module(garbage);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().message.rfind("hipModuleLoadData failed: hipError", 0), 0u) << m.error().describe();
}

}  // namespace
}  // namespace ft
