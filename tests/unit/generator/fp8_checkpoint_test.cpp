// The OCP -> fnuz checkpoint converter (generator/fp8_checkpoint.hpp): every
// dequantised value (byte x scale) survives bit for bit, -0 and NaN are handled
// as documented, and scales that cannot double are refused.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "generator/fp8_checkpoint.hpp"
#include "generator/device_facts.hpp"

namespace ft {
namespace {

std::vector<std::uint8_t> every_code() {
  std::vector<std::uint8_t> b;
  for (int c = 0; c < 256; ++c) b.push_back(std::uint8_t(c));
  return b;
}

TEST(Fp8Checkpoint, EveryDequantisedValueSurvives) {
  const std::vector<std::uint8_t> ocp = every_code();
  for (float scale : {1.0f, 0.0123f, 3.5e-5f, 1.0e30f, 0.0f}) {
    const std::vector<float> scales{scale};
    auto fnuz = convert_ocp_to_fnuz(ocp, scales);
    ASSERT_TRUE(fnuz) << fnuz.error().describe();
    ASSERT_EQ(fnuz->bytes.size(), 256u);
    ASSERT_EQ(fnuz->scales.size(), 1u);
    EXPECT_EQ(fnuz->scales[0], scale * 2.0f);
    for (int c = 0; c < 256; ++c) {
      const std::uint8_t out = fnuz->bytes[std::size_t(c)];
      if ((c & 0x7f) == 0x7f) {  // OCP NaN -> fnuz NaN
        EXPECT_EQ(out, 0x80) << c;
        EXPECT_TRUE(std::isnan(e4m3fnuz_to_f32(out)));
        continue;
      }
      // The same dequantised value: fnuz(byte) x 2 scale == ocp(byte) x scale, exactly
      // (-0 becomes +0, which is the same value).
      const float want = e4m3_to_f32(std::uint8_t(c)) * scale, got = e4m3fnuz_to_f32(out) * fnuz->scales[0];
      EXPECT_EQ(got, want) << "code " << c << " scale " << scale;
      EXPECT_FALSE(std::isnan(got)) << c;
    }
    EXPECT_EQ(fnuz->bytes[0x80], 0x00);  // OCP -0: 0x80 is fnuz's NaN
    EXPECT_EQ(fnuz->negative_zeros, 1u);
    EXPECT_EQ(fnuz->nans, 2u);
  }
}

// Only the two documented patterns change; every other byte is kept as it is.
TEST(Fp8Checkpoint, OnlyNegativeZeroAndNaNChange) {
  int changed = 0;
  for (int c = 0; c < 256; ++c) changed += ocp_e4m3_byte_to_fnuz(std::uint8_t(c)) != c;
  EXPECT_EQ(changed, 3);  // 0x80, 0x7f, 0xff
  EXPECT_EQ(ocp_e4m3_byte_to_fnuz(0x7e), 0x7e);  // OCP max 448 -> fnuz 224 (x 2 scale)
}

TEST(Fp8Checkpoint, ScalesOfAnyGranularityDouble) {
  const std::vector<std::uint8_t> bytes(128 * 256, 0x38);  // a [256, 128] weight, 1.0 everywhere
  std::vector<float> block_scales;                         // 2 x 1 blocks of 128 x 128
  for (float s : {0.5f, 0.25f}) block_scales.push_back(s);
  auto out = convert_ocp_to_fnuz(bytes, block_scales);
  ASSERT_TRUE(out);
  EXPECT_EQ(out->scales, (std::vector<float>{1.0f, 0.5f}));
  EXPECT_EQ(out->bytes, bytes);
  EXPECT_EQ(out->negative_zeros + out->nans, 0u);
}

TEST(Fp8Checkpoint, RefusesScalesThatCannotDouble) {
  const std::vector<std::uint8_t> bytes{0x38};
  for (float bad : {FLT_MAX, INFINITY, -INFINITY, NAN}) {
    auto out = convert_ocp_to_fnuz(bytes, std::vector<float>{1.0f, bad});
    ASSERT_FALSE(out) << bad;
    EXPECT_EQ(out.error().code, Errc::invalid_input);
    EXPECT_NE(out.error().message.find("scale 1"), std::string::npos) << out.error().message;
  }
}

}  // namespace
}  // namespace ft
