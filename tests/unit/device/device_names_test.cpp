// Names the device backends derive from what the runtimes report: flytune
// target names, version text, gcnArchName found in a hipDeviceProp_t.
#include <cstring>
#include <vector>

#include <gtest/gtest.h>

#include "generator/target.hpp"
#include "device/call_error.hpp"
#include "device/cuda_device.hpp"
#include "device/hip_device.hpp"

namespace ft {
namespace {

TEST(DeviceNames, ComputeCapabilityToTarget) {
  EXPECT_EQ(cuda_target_name(9, 0), "sm_90a");
  EXPECT_EQ(cuda_target_name(8, 9), "sm_89");
  EXPECT_EQ(cuda_target_name(8, 0), "sm_80");
  EXPECT_EQ(cuda_target_name(10, 0), "sm_100a");
  // The Hopper name is the one the target table knows.
  EXPECT_NE(find_target(cuda_target_name(9, 0)), nullptr);
}

TEST(DeviceNames, GcnArchNameToTarget) {
  EXPECT_EQ(hip_target_name("gfx942:sramecc+:xnack-"), "gfx942");
  EXPECT_EQ(hip_target_name("gfx90a:sramecc+:xnack-"), "gfx90a");
  EXPECT_EQ(hip_target_name("gfx950"), "gfx950");
  for (const char* arch : {"gfx90a:xnack-", "gfx942:sramecc+:xnack-", "gfx950:sramecc+:xnack-"})
    EXPECT_NE(find_target(hip_target_name(arch)), nullptr) << arch;
}

TEST(DeviceNames, VersionText) {
  EXPECT_EQ(cuda_version_text(13000), "13.0");
  EXPECT_EQ(cuda_version_text(12080), "12.8");
  EXPECT_EQ(hip_version_text(50221153), "5.2.21153");
  EXPECT_EQ(hip_version_text(60443483), "6.4.43483");
}

void put(std::vector<std::byte>& buf, std::size_t at, const char* s) { std::memcpy(buf.data() + at, s, std::strlen(s)); }

TEST(DeviceNames, FindsGcnArchNameInEitherPropertiesLayout) {
  // The device name comes first in both layouts; gcnArchName sits further on,
  // at a different offset in ROCm 5 and ROCm 6.
  for (std::size_t arch_at : {396u, 1160u}) {
    std::vector<std::byte> props(16384);
    put(props, 0, "AMD Instinct MI300X");
    put(props, arch_at, "gfx942:sramecc+:xnack-");
    EXPECT_EQ(find_gcn_arch_name(props), "gfx942:sramecc+:xnack-") << arch_at;
  }
}

TEST(DeviceNames, IgnoresGfxInsideOtherText) {
  std::vector<std::byte> props(4096);
  put(props, 0, "Radeon gfx942 board");  // not at the start of a string
  EXPECT_EQ(find_gcn_arch_name(props), "");
  put(props, 600, "gfx90a");
  EXPECT_EQ(find_gcn_arch_name(props), "gfx90a");
}

TEST(DeviceNames, NoArchNameGivesEmpty) {
  std::vector<std::byte> props(2048);
  put(props, 0, "some device");
  EXPECT_EQ(find_gcn_arch_name(props), "");
  put(props, 2045, "gfx");  // runs into the end without a terminator
  EXPECT_EQ(find_gcn_arch_name(props), "");
}

TEST(DeviceErrors, CallErrorWording) {
  Error e = runtime_call_error("cuMemAlloc", "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "cuda:0: 1024 bytes");
  EXPECT_EQ(e.code, Errc::device);
  EXPECT_EQ(e.describe(), "cuda:0: 1024 bytes: cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory");
  // HIP 5 describes an error by its name: say it once.
  EXPECT_EQ(runtime_call_message("hipMalloc", "hipErrorOutOfMemory", "hipErrorOutOfMemory"),
            "hipMalloc failed: hipErrorOutOfMemory");
  EXPECT_EQ(runtime_call_message("hipMalloc", "hipErrorOutOfMemory", ""), "hipMalloc failed: hipErrorOutOfMemory");
}

}  // namespace
}  // namespace ft
