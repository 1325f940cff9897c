// Telemetry never fails: without a management library every field is empty
// and the reason is given; the ROCm SMI record decodes in both layouts.
#include <cstring>

#include <gtest/gtest.h>

#include "device/telemetry.hpp"

namespace ft {
namespace {

TEST(Telemetry, PciBusIdToBdf) {
  EXPECT_EQ(pci_bdf_id("0000:3b:00.0"), std::uint64_t(0x3b) << 8);
  EXPECT_EQ(pci_bdf_id("0000:C1:1F.7"), (std::uint64_t(0xc1) << 8) | (0x1f << 3) | 7);
  EXPECT_EQ(pci_bdf_id("00000001:03:00.1"), (std::uint64_t(1) << 32) | (3 << 8) | 1);
  EXPECT_EQ(pci_bdf_id(""), std::nullopt);
  EXPECT_EQ(pci_bdf_id("0000:3b:00"), std::nullopt);
  EXPECT_EQ(pci_bdf_id("0000:3g:00.0"), std::nullopt);
  EXPECT_EQ(pci_bdf_id("0000:3b:20.0"), std::nullopt);  // device numbers stop at 0x1f
}

template <class T>
void store(std::byte* rec, std::size_t at, T v) {
  std::memcpy(rec + at, &v, sizeof v);
}

TEST(Telemetry, RsmiFrequenciesInBothLayouts) {
  // ROCm 5: {u32 count, u32 current, u64 hz[32]}
  alignas(8) std::byte v5[280] = {};
  store<std::uint32_t>(v5, 0, 3);
  store<std::uint32_t>(v5, 4, 2);
  store<std::uint64_t>(v5, 8, 500'000'000);
  store<std::uint64_t>(v5, 16, 1'300'000'000);
  store<std::uint64_t>(v5, 24, 2'100'000'000);
  EXPECT_EQ(rsmi_current_frequency_mhz(v5, 5), 2100);
  // ROCm 6: {bool deep_sleep, u32 count, u32 current, u64 hz[33]}
  alignas(8) std::byte v6[280] = {};
  store<bool>(v6, 0, true);
  store<std::uint32_t>(v6, 4, 2);
  store<std::uint32_t>(v6, 8, 1);
  store<std::uint64_t>(v6, 16, 900'000'000);
  store<std::uint64_t>(v6, 24, 1'300'000'000);
  EXPECT_EQ(rsmi_current_frequency_mhz(v6, 6), 1300);
  // A library whose version number disagrees with its layout still decodes.
  EXPECT_EQ(rsmi_current_frequency_mhz(v6, 5), 1300);
  alignas(8) std::byte empty[280] = {};
  EXPECT_EQ(rsmi_current_frequency_mhz(empty, 6), std::nullopt);
}

TEST(Telemetry, WithoutLibraryEveryFieldIsEmpty) {
  for (const char* runtime : {"cuda", "hip"}) {
    Telemetry t = Telemetry::open(runtime, "0000:3b:00.0", 0);
    if (t.available()) continue;  // this machine can read it (a GPU machine)
    EXPECT_FALSE(t.problem().empty()) << runtime;
    TelemetryReading r = t.read();
    EXPECT_FALSE(r.sm_clock_mhz || r.memory_clock_mhz || r.temperature_c || r.power_w) << runtime;
  }
  Telemetry unknown = Telemetry::open("tpu", "", 0);
  EXPECT_FALSE(unknown.available());
  EXPECT_EQ(unknown.problem(), "no telemetry for runtime 'tpu'");
}

}  // namespace
}  // namespace ft
