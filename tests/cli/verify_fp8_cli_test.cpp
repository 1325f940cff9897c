// flytune verify --emulate on an fp8 problem (the tiny layer in e4m3, one
// stage-1 and one stage-2 variant, T = 1 and 7): the device's fp8 reference
// is checked against the CPU's on the inputs the device drew -- the e4m3
// codes, their scales and (per-tensor) the static activation scale copied
// back (LayerBench::download_inputs) -- and every check passes. It used to
// end with "download_w1: fp8 weights are byte codes". Per-tensor, per-token
// and static scales (the static intermediate scale the device calibrated, copied
// back too) on gfx942 (e4m3fnuz).
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_flytune.hpp"

namespace ft {
namespace {

class VerifyFp8 : public ::testing::TestWithParam<const char*> {};

TEST_P(VerifyFp8, ChecksTheReferenceAgainstTheCpuAndEveryVariant) {
  auto r = test::run_flytune({"verify", "--emulate", "--target", "gfx942", "--problem", "tiny", "--dtype", "fp8",
                              "--scales", GetParam(), "--space", "small;tile_m=32;split_k=1", "--tokens", "1,7",
                              "--seed", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.output;
  EXPECT_EQ(j["failures"], 0) << j.dump(2);
  std::size_t references = 0, variants = 0;
  for (const auto& c : j["checks"]) {
    EXPECT_TRUE(c["passed"].get<bool>()) << c.dump();
    const std::string check = c["check"];
    references += check.starts_with("reference vs CPU");
    variants += check.starts_with("ft_gfx942_moe");
  }
  EXPECT_EQ(references, 4u) << j.dump(2);  // both routed-weight placements at both token counts
  EXPECT_EQ(variants, 4u) << j.dump(2);    // a stage-1 and a stage-2 variant at both
}

std::string scale_name(const char* mode) {
  const std::string m = mode;
  return m == "per-tensor" ? "PerTensor" : m == "per-token" ? "PerToken" : "Static";
}

INSTANTIATE_TEST_SUITE_P(Scales, VerifyFp8, ::testing::Values("per-tensor", "per-token", "static"),
                         [](const auto& info) { return scale_name(info.param); });

}  // namespace
}  // namespace ft
