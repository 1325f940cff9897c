// The kernels' fp8 conversions (templates/ft/numeric.hpp, seen on the host
// through generator/device_facts.hpp) against an independent CPU model of each
// format, bitwise: every code decoded, and f32 values encoded over every rounding
// boundary, every special and a dense strided sweep of f32 bit patterns. The
// model works in double over the table of the format's values: nearest value,
// ties to the even code, saturation to +-max, NaN to the format's NaN. Wrong
// encoders (a bias off by one, truncation instead of rounding) and a wrong
// decoder are shown to fail the same comparisons.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "generator/device_facts.hpp"

namespace ft {
namespace {

// --- the model ---------------------------------------------------------------

struct Model {
  const char* name;
  int bias;
  bool fnuz;
  std::uint8_t nan_code;  // what NaN encodes to
};
constexpr Model kOcp{"e4m3 (OCP)", 7, false, 0x7f};
constexpr Model kFnuz{"e4m3fnuz", 8, true, 0x80};

bool model_is_nan(const Model& f, int code) { return f.fnuz ? code == 0x80 : (code & 0x7f) == 0x7f; }

// The value of a code by the format's definition, in double.
double model_value(const Model& f, int code) {
  if (model_is_nan(f, code)) return std::numeric_limits<double>::quiet_NaN();
  const int e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? std::ldexp(m / 8.0, 1 - f.bias) : std::ldexp(1.0 + m / 8.0, e - f.bias);
  return (code & 0x80) ? -mag : mag;
}

// Non-negative finite codes in increasing value: 0x00 .. the largest finite one.
std::vector<double> magnitudes(const Model& f) {
  std::vector<double> v;
  for (int c = 0; c < 0x80 && !model_is_nan(f, c); ++c) v.push_back(model_value(f, c));
  return v;
}

std::uint8_t model_encode(const Model& f, float x) {
  if (std::isnan(x)) return f.nan_code;
  static const std::vector<double> ocp = magnitudes(kOcp), fnuz = magnitudes(kFnuz);
  const std::vector<double>& table = f.fnuz ? fnuz : ocp;
  const double a = std::fabs(double(x));
  const int sign = std::signbit(x) ? 0x80 : 0;
  int code;
  if (a >= table.back()) {
    code = int(table.size()) - 1;  // saturate (infinities too)
  } else {
    // The largest code whose value is <= a (the table increases with the code).
    const int lo = int(std::upper_bound(table.begin(), table.end(), a) - table.begin()) - 1;
    const double below = a - table[std::size_t(lo)], above = table[std::size_t(lo + 1)] - a;
    code = below < above ? lo : above < below ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  }
  if (f.fnuz && code == 0) return 0;  // no -0
  return std::uint8_t(sign | code);
}

float model_decode(const Model& f, std::uint8_t code) {
  return model_is_nan(f, code) ? std::bit_cast<float>(0x7fc00000u) : float(model_value(f, code));
}

// --- what is compared ---------------------------------------------------------

using Encoder = std::function<std::uint8_t(float)>;
using Decoder = std::function<float(std::uint8_t)>;

Encoder encoder_of(const Model& f) {
  return f.fnuz ? Encoder(f32_to_e4m3fnuz) : Encoder(f32_to_e4m3);
}
Decoder decoder_of(const Model& f) {
  return f.fnuz ? Decoder(e4m3fnuz_to_f32) : Decoder(e4m3_to_f32);
}

// Every rounding boundary of the format and its f32 neighbours, both signs: the
// midpoint of every pair of adjacent values (the tie), one f32 ulp either side,
// every value itself and its neighbours, and the same around +-max (the
// saturation threshold and past it) and zero.
std::vector<float> boundary_values(const Model& f) {
  const std::vector<double> t = magnitudes(f);
  std::vector<float> v;
  auto around = [&](float x) {
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
      v.push_back(y);
      v.push_back(-y);
    }
  };
  for (std::size_t i = 0; i < t.size(); ++i) {
    around(float(t[i]));
    if (i + 1 < t.size()) around(float((t[i] + t[i + 1]) / 2));  // exact: fp8 values have 4 bits
  }
  const double max = t.back(), half_ulp = (t.back() - t[t.size() - 2]) / 2;
  for (double x : {max + half_ulp, max + 2 * half_ulp, 2 * max, 1e30, double(FLT_MAX)}) around(float(x));
  around(float(t[1] / 2));  // half the smallest subnormal: ties to 0
  around(float(t[1] / 4));
  around(std::numeric_limits<float>::denorm_min());
  around(std::numeric_limits<float>::min());
  return v;
}

std::vector<float> special_values() {
  std::vector<float> v{0.0f, -0.0f, INFINITY, -INFINITY};
  for (std::uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu, 0xffffffffu,
                             0x7fa00000u, 0x00000001u, 0x80000001u, 0x007fffffu, 0x807fffffu})
    v.push_back(std::bit_cast<float>(bits));
  return v;
}

// Mismatches of `enc` against the model over `values`, with the first few described.
struct Mismatches {
  std::size_t count = 0;
  std::string first;
};

Mismatches compare_encoder(const Model& f, const Encoder& enc, const std::vector<float>& values) {
  Mismatches m;
  for (float x : values) {
    const std::uint8_t want = model_encode(f, x), got = enc(x);
    if (got == want) continue;
    if (m.count++ < 5)
      m.first += fmt::format("{}: f32 {:#010x} ({}) encodes to {:#04x}, the model says {:#04x}\n", f.name,
                             std::bit_cast<std::uint32_t>(x), x, got, want);
  }
  return m;
}

// A dense strided sweep of f32 bit patterns: every 997th pattern of all 2^32,
// and every 61st over the exponents where the format's values live (from below
// half its smallest subnormal to past its max).
std::vector<float> sweep_values(const Model& f) {
  std::vector<float> v;
  for (std::uint64_t b = 0; b < (1ull << 32); b += 997) v.push_back(std::bit_cast<float>(std::uint32_t(b)));
  const std::uint32_t lo = std::uint32_t(127 - f.bias - 5) << 23, hi = std::uint32_t(127 + 10) << 23;
  for (std::uint32_t b = lo; b < hi; b += 61) {
    v.push_back(std::bit_cast<float>(b));
    v.push_back(std::bit_cast<float>(b | 0x80000000u));
  }
  return v;
}

class Fp8Format : public ::testing::TestWithParam<Model> {};

TEST_P(Fp8Format, EveryCodeDecodesAsTheModelSays) {
  const Model& f = GetParam();
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    const float want = model_decode(f, std::uint8_t(c)), got = decoder_of(f)(std::uint8_t(c));
    EXPECT_EQ(std::bit_cast<std::uint32_t>(got), std::bit_cast<std::uint32_t>(want))
        << f.name << " code " << fmt::format("{:#04x}", c) << ": " << got << " vs " << want;
    nans += model_is_nan(f, c);
  }
  EXPECT_EQ(nans, f.fnuz ? 1 : 2);
  EXPECT_EQ(magnitudes(f).back(), f.fnuz ? 240.0 : 448.0);
  EXPECT_EQ(magnitudes(f)[1], f.fnuz ? std::ldexp(1.0, -10) : std::ldexp(1.0, -9));
  EXPECT_EQ(std::bit_cast<std::uint32_t>(decoder_of(f)(0x80)), f.fnuz ? 0x7fc00000u : 0x80000000u);  // NaN or -0
}

TEST_P(Fp8Format, EveryCodeSurvivesARoundTrip) {
  const Model& f = GetParam();
  for (int c = 0; c < 256; ++c) {
    if (model_is_nan(f, c)) continue;
    EXPECT_EQ(encoder_of(f)(decoder_of(f)(std::uint8_t(c))), c) << f.name << fmt::format(" {:#04x}", c);
  }
}

TEST_P(Fp8Format, SpecialsSaturateAndKeepNaN) {
  const Model& f = GetParam();
  const Encoder enc = encoder_of(f);
  const std::uint8_t max = f.fnuz ? 0x7f : 0x7e;
  EXPECT_EQ(enc(INFINITY), max);
  EXPECT_EQ(enc(-INFINITY), 0x80 | max);
  EXPECT_EQ(enc(1e30f), max);
  EXPECT_EQ(enc(-FLT_MAX), 0x80 | max);
  for (std::uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu}) EXPECT_EQ(enc(std::bit_cast<float>(nan)), f.nan_code);
  EXPECT_EQ(enc(0.0f), 0x00);
  EXPECT_EQ(enc(-0.0f), f.fnuz ? 0x00 : 0x80);       // fnuz has no -0
  EXPECT_EQ(enc(-1e-30f), f.fnuz ? 0x00 : 0x80);
  EXPECT_EQ(compare_encoder(f, enc, special_values()).count, 0u) << compare_encoder(f, enc, special_values()).first;
}

TEST_P(Fp8Format, EveryRoundingBoundaryEncodesAsTheModelSays) {
  const Model& f = GetParam();
  const Mismatches m = compare_encoder(f, encoder_of(f), boundary_values(f));
  EXPECT_EQ(m.count, 0u) << m.first;
  // A few by hand: ties go to the even code.
  const Encoder enc = encoder_of(f);
  const float one = 1.0f, step = 0.125f;  // 1.0 has code 0x38 (OCP) / 0x40 (fnuz): mantissa 0
  const std::uint8_t c1 = f.fnuz ? 0x40 : 0x38;
  EXPECT_EQ(enc(one + step / 2), c1);                          // tie, even stays
  EXPECT_EQ(enc(one + 3 * step / 2), c1 + 2);                  // tie, odd rounds up
  EXPECT_EQ(enc(std::nextafter(one + step / 2, 2.0f)), c1 + 1);
}

TEST_P(Fp8Format, DenseSweepOfF32EncodesAsTheModelSays) {
  const Model& f = GetParam();
  const std::vector<float> values = sweep_values(f);
  EXPECT_GT(values.size(), 8'000'000u);
  const Mismatches m = compare_encoder(f, encoder_of(f), values);
  EXPECT_EQ(m.count, 0u) << m.first;
}

// --- mutants: the comparisons above must catch a wrong encoder or decoder -------

// Rounding by truncation: the largest magnitude code not above |x| (saturating, NaN kept).
template <class F>
std::uint8_t truncating_encode(float x) {
  const std::uint32_t b = std::bit_cast<std::uint32_t>(x), mag = b & 0x7fffffffu;
  if (mag > 0x7f800000u) return F::nan;
  const std::uint8_t sign = std::uint8_t((b >> 24) & 0x80u);
  if (mag > std::bit_cast<std::uint32_t>(e4m3_decode<F>(F::max_code))) return std::uint8_t(sign | F::max_code);
  const int exp = int(mag >> 23);
  std::uint32_t code;
  if (exp - 127 + F::bias >= 1) code = (mag >> 20) - (std::uint32_t(127 - F::bias) << 3);
  else {
    const int shift = 148 - F::bias - exp;
    code = exp == 0 || shift > 24 ? 0 : ((mag & 0x7fffffu) | 0x800000u) >> shift;
  }
  if (F::fnuz && code == 0) return 0;
  return std::uint8_t(sign | code);
}

TEST_P(Fp8Format, AWrongBiasOrTruncationFailsTheComparisons) {
  const Model& f = GetParam();
  // The format with its bias off by one (the other format's bias, the same NaN rules).
  const Encoder off_by_one = f.fnuz ? Encoder(e4m3_encode<E4m3Format<7, true>>) : Encoder(e4m3_encode<E4m3Format<8, false>>);
  const Encoder truncating = f.fnuz ? Encoder(truncating_encode<FnuzE4m3>) : Encoder(truncating_encode<OcpE4m3>);
  const std::vector<float> boundaries = boundary_values(f), sweep = sweep_values(f);
  for (const auto& [name, enc] : {std::pair{"bias off by one", off_by_one}, std::pair{"truncating", truncating}}) {
    const std::size_t at_boundaries = compare_encoder(f, enc, boundaries).count, in_sweep = compare_encoder(f, enc, sweep).count;
    EXPECT_GT(at_boundaries, 100u) << name << " passed the boundary values";
    EXPECT_GT(in_sweep, 1000u) << name << " passed the sweep";
    std::printf("%s %s: %zu of %zu boundary values and %zu of %zu sweep values differ from the model\n", f.name, name,
                at_boundaries, boundaries.size(), in_sweep, sweep.size());
  }
  // And a decoder with the bias off by one disagrees on every nonzero finite code.
  const Decoder wrong = f.fnuz ? Decoder(e4m3_decode<E4m3Format<7, true>>) : Decoder(e4m3_decode<E4m3Format<8, false>>);
  int differ = 0;
  for (int c = 0; c < 256; ++c)
    differ += std::bit_cast<std::uint32_t>(wrong(std::uint8_t(c))) != std::bit_cast<std::uint32_t>(model_decode(f, std::uint8_t(c)));
  EXPECT_GE(differ, f.fnuz ? 253 : 252);  // all but the zeros and NaNs
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Format, ::testing::Values(kOcp, kFnuz),
                         [](const auto& info) { return std::string(info.param.fnuz ? "fnuz" : "ocp"); });

// The one spelling the templates use for every element type reaches the same functions.
TEST(Fp8Format, ElemSpellingReachesTheFormats) {
  static_assert(elem_bytes(Elem::e4m3) == 1 && elem_bytes(Elem::e4m3fnuz) == 1 && elem_bytes(Elem::bf16) == 2);
  static_assert(sizeof(storage_t<Elem::e4m3>) == 1 && sizeof(storage_t<Elem::f16>) == 2);
  EXPECT_EQ(from_f32<Elem::e4m3>(1.0f), 0x38);
  EXPECT_EQ(from_f32<Elem::e4m3fnuz>(1.0f), 0x40);
  EXPECT_EQ(to_f32<Elem::e4m3>(0x7e), 448.0f);
  EXPECT_EQ(to_f32<Elem::e4m3fnuz>(0x7f), 240.0f);
  // The same bits mean half the value in fnuz (the checkpoint converter relies on it).
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f || c == 0x80) continue;  // NaNs of either, OCP -0 (fnuz NaN)
    EXPECT_EQ(e4m3fnuz_to_f32(std::uint8_t(c)) * 2.0f, e4m3_to_f32(std::uint8_t(c))) << c;
  }
}

}  // namespace
}  // namespace ft
