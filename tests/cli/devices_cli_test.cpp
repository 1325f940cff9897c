// flytune devices: lists every GPU or says, per runtime, why there is none;
// never an error exit, and nothing else on the output (no library noise).
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_flytune.hpp"
#include "device/runtimes.hpp"

using ft::test::run_flytune;

namespace {

std::size_t gpu_count() {
  std::size_t n = 0;
  for (const ft::RuntimeReport& r : ft::probe_runtimes()) n += r.devices.size();
  return n;
}

TEST(DevicesCli, ListsGpusOrSaysNone) {
  auto r = run_flytune({"devices"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  if (gpu_count() == 0) {
    // Only the per-runtime reasons and the verdict: nothing the libraries printed.
    std::istringstream lines(r.output);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      ++n;
      bool expected = line.rfind("hip: ", 0) == 0 || line.rfind("cuda: ", 0) == 0 || line == "no GPU found";
      EXPECT_TRUE(expected) << "unexpected line: " << line;
    }
    EXPECT_EQ(n, 3) << r.output;
    EXPECT_NE(r.output.find("\nno GPU found\n"), std::string::npos) << r.output;
  } else {
    for (const ft::RuntimeReport& rep : ft::probe_runtimes())
      for (const ft::DeviceInfo& d : rep.devices) {
        EXPECT_NE(r.output.find(ft::device_selector(d)), std::string::npos) << r.output;
        EXPECT_NE(r.output.find(d.arch), std::string::npos) << r.output;
      }
    EXPECT_EQ(r.output.find("no GPU found"), std::string::npos) << r.output;
  }
}

TEST(DevicesCli, JsonParsesAndMatchesTheProbe) {
  auto r = run_flytune({"devices", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  ASSERT_TRUE(j["devices"].is_array());
  ASSERT_EQ(j["runtimes"].size(), 2u);
  EXPECT_EQ(j["runtimes"][0]["runtime"], "hip");
  EXPECT_EQ(j["runtimes"][1]["runtime"], "cuda");
  EXPECT_EQ(j["devices"].size(), gpu_count());
  for (const auto& rt : j["runtimes"]) {
    if (rt["gpus"] == 0) { EXPECT_TRUE(rt.contains("problem")) << rt.dump(); }
  }
  for (const auto& d : j["devices"]) {
    EXPECT_GT(d["compute_units"].get<int>(), 0) << d.dump();
    EXPECT_TRUE(d.contains("telemetry")) << d.dump();
  }
}

TEST(DevicesCli, BadFlagIsUsageError) {
  auto r = run_flytune({"devices", "--frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

}  // namespace
