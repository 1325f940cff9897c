// The runtime probes on whatever machine runs the tests: each runtime either
// lists GPUs or says exactly why it has none, quickly; opening a GPU that is
// not there is Errc::no_device with one clear line.
#include <chrono>

#include <gtest/gtest.h>

#include "device/cuda_device.hpp"
#include "device/hip_device.hpp"
#include "device/runtimes.hpp"

namespace ft {
namespace {

bool has_gpu(const std::vector<RuntimeReport>& reports) {
  for (const RuntimeReport& r : reports)
    if (!r.devices.empty()) return true;
  return false;
}

TEST(Runtimes, ProbeIsCleanAndFast) {
  auto start = std::chrono::steady_clock::now();
  std::vector<RuntimeReport> reports = probe_runtimes();
  auto seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].runtime, "hip");
  EXPECT_EQ(reports[1].runtime, "cuda");
  for (const RuntimeReport& r : reports) {
    if (r.devices.empty()) {
      EXPECT_FALSE(r.problem.empty()) << r.runtime << " has no GPU and says nothing";
      EXPECT_FALSE(r.loaded) << r.runtime;
    }
    for (const DeviceInfo& d : r.devices) {
      EXPECT_EQ(d.runtime, r.runtime);
      EXPECT_FALSE(d.name.empty());
      EXPECT_GT(d.compute_units, 0) << d.name;
      EXPECT_GT(d.memory_bytes, 0u) << d.name;
      EXPECT_FALSE(d.arch.empty()) << d.name;
    }
  }
}

TEST(Runtimes, HipWithoutGpuSaysSo) {
  RuntimeReport r = probe_hip();
  if (!r.devices.empty()) GTEST_SKIP() << "an AMD GPU is present";
  if (r.library.empty()) {
    EXPECT_EQ(r.problem, "libamdhip64.so not found (no ROCm HIP runtime)");
  } else {
    EXPECT_EQ(r.problem, "no AMD GPU found");
    EXPECT_EQ(r.detail.rfind("hipGetDeviceCount: ", 0), 0u) << r.detail;
    EXPECT_FALSE(r.version.empty());
  }
}

TEST(Runtimes, CudaWithoutDriverSaysSo) {
  RuntimeReport r = probe_cuda();
  if (!r.devices.empty()) GTEST_SKIP() << "an NVIDIA GPU is present";
  if (r.library.empty())
    EXPECT_EQ(r.problem, "libcuda.so.1 not found (no NVIDIA driver)");
  else
    EXPECT_EQ(r.problem, "no NVIDIA GPU found");
}

TEST(Runtimes, OpeningAbsentHipGpuIsNoDevice) {
  if (!probe_hip().devices.empty()) GTEST_SKIP() << "an AMD GPU is present";
  auto d = open_device("hip:0");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Errc::no_device);
  EXPECT_EQ(d.error().context, "hip:0");
  EXPECT_NE(d.error().message.find("no AMD GPU found"), std::string::npos) << d.error().message;
}

TEST(Runtimes, OpeningAbsentCudaGpuIsNoDevice) {
  if (!probe_cuda().devices.empty()) GTEST_SKIP() << "an NVIDIA GPU is present";
  auto d = open_device("cuda:0");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Errc::no_device);
  EXPECT_EQ(d.error().context, "cuda:0");
}

TEST(Runtimes, FirstGpuWhenNoneSaysWhyForEachRuntime) {
  if (has_gpu(probe_runtimes())) GTEST_SKIP() << "a GPU is present";
  auto d = open_device("");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Errc::no_device);
  const std::string& m = d.error().message;
  EXPECT_EQ(m.rfind("no GPU found (hip: ", 0), 0u) << m;
  EXPECT_NE(m.find("; cuda: "), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

TEST(Runtimes, OrdinalPastTheLastGpuIsNoDevice) {
  auto d = open_device("cuda:4096");
  ASSERT_FALSE(d);
  EXPECT_EQ(d.error().code, Errc::no_device) << d.error().describe();
  auto h = open_device("hip:4096");
  ASSERT_FALSE(h);
  EXPECT_EQ(h.error().code, Errc::no_device) << h.error().describe();
}

TEST(Runtimes, MalformedSelectorIsUsageError) {
  for (const char* s : {"tpu:0", "cuda:", "cuda:x", "cuda:-1", "hip:0x", "gpu"}) {
    auto d = open_device(s);
    ASSERT_FALSE(d) << s;
    EXPECT_EQ(d.error().code, Errc::usage) << s;
    EXPECT_NE(d.error().message.find("cuda:N or hip:N"), std::string::npos) << d.error().message;
  }
}

}  // namespace
}  // namespace ft
