// The shared workload pieces: seeded generation and routing, replay files, the
// 16-bit conversions, the comparison and its bounds, the host weight shuffle
// and tiling,
// and the CPU reference against a double-precision recomputation.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "measure/workload/compare.hpp"
#include "measure/workload/half.hpp"
#include "measure/workload/reference.hpp"
#include "measure/workload/shuffle.hpp"
#include "measure/workload/workload.hpp"

namespace ft {
namespace {

Problem tiny(DType d = DType::bf16, const char* routing = "uniform") {
  Problem p;
  p.name = "tiny";
  p.experts = 8;
  p.hidden = 64;
  p.inter = 64;
  p.topk = 2;
  p.dtype = d;
  p.routing = *Routing::parse(routing);
  return p;
}

TEST(Half, F16ConversionsMatchTheCompilersFloat16) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const float f = f16_bits_to_f32(std::uint16_t(h));
    const float want = float(std::bit_cast<_Float16>(std::uint16_t(h)));
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(f));
      continue;
    }
    ASSERT_EQ(std::bit_cast<std::uint32_t>(f), std::bit_cast<std::uint32_t>(want)) << h;
    ASSERT_EQ(f32_to_f16_bits(f), std::uint16_t(h)) << h;
  }
  for (std::uint64_t i = 0; i < 200000; ++i) {
    const float f = random_normal(3, i) * std::ldexp(1.0f, int(i % 40) - 26);
    ASSERT_EQ(f32_to_f16_bits(f), std::bit_cast<std::uint16_t>(_Float16(f))) << f;
  }
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16_bits(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even stays
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, odd rounds up
  EXPECT_EQ(f32_to_bf16_bits(std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_TRUE(std::isnan(bf16_bits_to_f32(f32_to_bf16_bits(std::nanf("")))));
  EXPECT_EQ(bf16_bits_to_f32(0xc040), -3.0f);
}

TEST(Workload, SameSeedSameBytesOtherSeedOtherBytes) {
  auto a = make_workload(tiny(), 9, {.seed = 4});
  auto b = make_workload(tiny(), 9, {.seed = 4});
  auto c = make_workload(tiny(), 9, {.seed = 5});
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(a->x, b->x);
  EXPECT_EQ(a->w1, b->w1);
  EXPECT_EQ(a->topk_ids, b->topk_ids);
  EXPECT_EQ(a->topk_weights, b->topk_weights);
  EXPECT_NE(a->x, c->x);
  EXPECT_NE(a->w2, c->w2);
  EXPECT_EQ(a->x.size(), 9u * 64);
  EXPECT_EQ(a->w1.size(), 8u * 2 * 64 * 64);
  EXPECT_EQ(a->w2.size(), 8u * 64 * 64);
}

TEST(Workload, ValuesAreScaledNormals) {
  auto w = make_workload(tiny(), 200, {.seed = 1});
  ASSERT_TRUE(w);
  auto moments = [](const std::vector<std::uint16_t>& v) {
    double s = 0, s2 = 0;
    for (auto h : v) {
      const double f = bf16_bits_to_f32(h);
      s += f;
      s2 += f * f;
    }
    return std::pair{s / double(v.size()), std::sqrt(s2 / double(v.size()))};
  };
  const auto [mx, rx] = moments(w->x);
  EXPECT_NEAR(mx, 0.0, 0.03);
  EXPECT_NEAR(rx, 1.0, 0.03);
  EXPECT_NEAR(moments(w->w1).second, 1.0 / std::sqrt(64.0), 0.01);
  EXPECT_NEAR(moments(w->w2).second, 1.0 / std::sqrt(64.0), 0.01);
}

TEST(WorkloadRouting, DistinctExpertsAndSoftmaxWeights) {
  for (const char* r : {"uniform", "zipf:1.2", "hot:3"}) {
    auto w = make_routing(tiny(DType::bf16, r), 500, {.seed = 2});
    ASSERT_TRUE(w) << r;
    for (int t = 0; t < 500; ++t) {
      const int a = w->ids[std::size_t(2 * t)], b = w->ids[std::size_t(2 * t + 1)];
      EXPECT_NE(a, b) << r;
      EXPECT_TRUE(a >= 0 && a < 8 && b >= 0 && b < 8) << r;
      EXPECT_NEAR(w->weights[std::size_t(2 * t)] + w->weights[std::size_t(2 * t + 1)], 1.0f, 1e-6f);
      EXPECT_GT(w->weights[std::size_t(2 * t)], 0.0f);
    }
  }
}

TEST(WorkloadRouting, SkewAndHotSets) {
  Workload w;
  w.problem = tiny(DType::bf16, "zipf:1.5");
  w.tokens = 2000;
  w.topk_ids = make_routing(w.problem, 2000, {})->ids;
  const auto zipf = w.tokens_per_expert();
  EXPECT_GT(zipf[0], 3 * zipf[7]);
  w.problem = tiny(DType::bf16, "hot:2");
  w.topk_ids = make_routing(w.problem, 50, {})->ids;
  w.tokens = 50;
  const auto hot = w.tokens_per_expert();
  EXPECT_EQ(hot[0], 50);
  EXPECT_EQ(hot[1], 50);
  for (int e = 2; e < 8; ++e) EXPECT_EQ(hot[std::size_t(e)], 0);
}

TEST(WorkloadRouting, EmptyExpertsGetNoTokens) {
  auto w = make_workload(tiny(), 300, {.seed = 3, .empty_experts = 3});
  ASSERT_TRUE(w);
  const auto counts = w->tokens_per_expert();
  for (int e = 5; e < 8; ++e) EXPECT_EQ(counts[std::size_t(e)], 0);
  for (int e = 0; e < 5; ++e) EXPECT_GT(counts[std::size_t(e)], 0);
  EXPECT_FALSE(make_workload(tiny(), 3, {.empty_experts = 7}));  // 1 expert left for top-2
  EXPECT_FALSE(make_workload(tiny(), 0, {}));
}

class ReplayFile : public ::testing::Test {
 protected:
  std::string write(const std::string& text) {
    path_ = std::filesystem::temp_directory_path() / ("ft_replay_" + std::to_string(::getpid()) + ".txt");
    std::ofstream(path_) << text;
    return path_.string();
  }
  void TearDown() override { std::filesystem::remove(path_); }
  std::filesystem::path path_;
};

TEST_F(ReplayFile, RecordsAreReplayedCyclically) {
  Problem p = tiny(DType::bf16, ("replay:" + write("# recorded\n0 1\n\n7,3\n")).c_str());
  auto r = make_routing(p, 5, {});
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->ids, (std::vector<int>{0, 1, 7, 3, 0, 1, 7, 3, 0, 1}));
}

TEST_F(ReplayFile, BadLinesGiveOneClearError) {
  const std::pair<const char*, const char*> cases[] = {{"0 1\n2\n", "line 2: 1 ids"},
                                                       {"0 9\n", "line 1: expert id 9 out of range"},
                                                       {"3 3\n", "line 1: an expert id repeats"},
                                                       {"0 x1\n", "line 1: '0 x1' is not a list of integers"},
                                                       {"# nothing\n", "has no tokens"}};
  for (const auto& [text, want] : cases) {
    Problem p = tiny(DType::bf16, ("replay:" + write(text)).c_str());
    auto r = make_routing(p, 4, {});
    ASSERT_FALSE(r) << text;
    EXPECT_NE(r.error().describe().find(want), std::string::npos) << r.error().describe();
    EXPECT_EQ(r.error().describe().find('\n'), std::string::npos) << r.error().describe();
    EXPECT_NE(r.error().describe().find(path_.string()), std::string::npos);
  }
  Problem missing = tiny(DType::bf16, "replay:/no/such/file");
  EXPECT_EQ(make_routing(missing, 1, {}).error().code, Errc::io);
}

TEST(Compare, PassesRoundingFailsNanAndErrors) {
  std::vector<float> ref(1000);
  for (std::size_t i = 0; i < ref.size(); ++i) ref[i] = random_normal(8, i);
  std::vector<std::uint16_t> got(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) got[i] = f32_to_bf16_bits(ref[i]);
  const Comparison ok = compare_output(got, ref, DType::bf16);
  EXPECT_TRUE(ok.passed) << ok.summary();
  EXPECT_LT(ok.rel_l2, 3e-3);

  auto nan = got;
  nan[17] = 0xffff;
  const Comparison bad_nan = compare_output(nan, ref, DType::bf16);
  EXPECT_FALSE(bad_nan.passed);
  EXPECT_EQ(bad_nan.nonfinite, 1u);
  EXPECT_NE(bad_nan.summary(100).find("first at [0, 17]"), std::string::npos) << bad_nan.summary(100);

  auto inf = got;
  inf[3] = 0x7f80;
  EXPECT_FALSE(compare_output(inf, ref, DType::bf16).passed);

  auto one_wrong = got;  // a single element far off: the max-abs bound catches it
  one_wrong[500] = f32_to_bf16_bits(ref[500] + 0.5f);
  EXPECT_FALSE(compare_output(one_wrong, ref, DType::bf16).passed);

  std::vector<std::uint16_t> f16(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) f16[i] = f32_to_f16_bits(ref[i]);
  EXPECT_TRUE(compare_output(f16, ref, DType::f16).passed);
  EXPECT_FALSE(compare_output(got, ref, DType::f16).passed) << "bf16 precision must not pass the f16 bound";
  EXPECT_FALSE(compare_output(std::span(got).first(10), ref, DType::bf16).passed);
}

TEST(Shuffle, IndexIsAPermutationOfWholeChunks) {
  const long long rows = 48, cols = 40;
  std::set<long long> seen;
  for (long long r = 0; r < rows; ++r)
    for (long long k = 0; k < cols; ++k) {
      const long long s = shuffled_index(r, k, cols);
      ASSERT_TRUE(s >= 0 && s < rows * cols);
      seen.insert(s);
      if (k % 8 != 0) { EXPECT_EQ(s, shuffled_index(r, k - 1, cols) + 1); }  // 16-byte chunks stay contiguous
    }
  EXPECT_EQ(seen.size(), std::size_t(rows * cols));
  // The 16 rows of one k-chunk are 256 consecutive bytes.
  EXPECT_EQ(shuffled_index(1, 8, cols) - shuffled_index(0, 8, cols), 8);
  std::vector<std::uint16_t> src(std::size_t(rows * cols));
  EXPECT_FALSE(arrange_weights_host(src, 40, 48, WeightLayout::shuffled));
  EXPECT_FALSE(arrange_weights_host(src, rows, 44, WeightLayout::shuffled));
}

// The tiled layout (weight_layout.hpp): 64-column slices of all rows, each
// row's eight 16-byte chunks in the 128-byte swizzle.
TEST(Tiled, IndexIsAPermutationOfWholeChunks) {
  const long long rows = 32, cols = 192;
  std::set<long long> seen;
  for (long long r = 0; r < rows; ++r)
    for (long long k = 0; k < cols; ++k) {
      const long long t = tiled_index(r, k, rows);
      ASSERT_TRUE(t >= 0 && t < rows * cols) << r << "," << k;
      seen.insert(t);
      if (k % 8 != 0) { EXPECT_EQ(t, tiled_index(r, k - 1, rows) + 1); }  // 16-byte chunks stay contiguous
      // Each row's 64 columns of a slice fill its own 128 bytes of that slice.
      EXPECT_EQ(t / 64, (k / 64) * rows + r) << r << "," << k;
    }
  EXPECT_EQ(seen.size(), std::size_t(rows * cols));
}

TEST(Tiled, RowsZeroToSevenSwizzleTheirChunks) {
  const long long rows = 16;
  for (long long r = 0; r < 8; ++r)
    for (long long c = 0; c < 8; ++c) {
      // Chunk c of row r sits at chunk c ^ r of the row's 128 bytes, in every slice.
      EXPECT_EQ(tiled_index(r, 8 * c, rows), r * 64 + ((c ^ r) * 8)) << r << "," << c;
      EXPECT_EQ(tiled_index(r, 64 + 8 * c, rows), (rows + r) * 64 + ((c ^ r) * 8)) << r << "," << c;
      // Rows 8..15 repeat the pattern of rows 0..7 (row % 8).
      EXPECT_EQ(tiled_index(r + 8, 8 * c, rows) - tiled_index(r, 8 * c, rows), 8 * 64);
    }
  // Row 0 keeps its chunks in order; row 7 reverses them.
  EXPECT_EQ(tiled_index(0, 24, rows), 24);
  EXPECT_EQ(tiled_index(7, 0, rows), 7 * 64 + 56);
  EXPECT_EQ(tiled_index(7, 56, rows), 7 * 64);
}

TEST(Tiled, HostArrangementPlacesEveryElementAndChecksSizes) {
  const long long rows = 32, cols = 128;
  std::vector<std::uint16_t> src(std::size_t(rows * cols));
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = std::uint16_t(i * 7 + 1);
  auto tiled = arrange_weights_host(src, rows, cols, WeightLayout::tiled);
  ASSERT_TRUE(tiled) << tiled.error().describe();
  for (long long r = 0; r < rows; ++r)
    for (long long k = 0; k < cols; ++k)
      ASSERT_EQ((*tiled)[std::size_t(tiled_index(r, k, rows))], src[std::size_t(r * cols + k)]) << r << "," << k;
  auto shuffled = arrange_weights_host(src, rows, cols, WeightLayout::shuffled);
  ASSERT_TRUE(shuffled);
  EXPECT_NE(*tiled, *shuffled);
  EXPECT_EQ(*arrange_weights_host(src, rows, cols, WeightLayout::plain), src);
  // cols must be a multiple of 64 for tiled (8 is enough for shuffled), rows of 16.
  std::vector<std::uint16_t> narrow(std::size_t(rows * 96));
  auto refused = arrange_weights_host(narrow, rows, 96, WeightLayout::tiled);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("columns of 64"), std::string::npos) << refused.error().describe();
  EXPECT_TRUE(arrange_weights_host(narrow, rows, 96, WeightLayout::shuffled));
  std::vector<std::uint16_t> short_rows(std::size_t(24 * cols));
  EXPECT_FALSE(arrange_weights_host(short_rows, 24, cols, WeightLayout::tiled));
  EXPECT_FALSE(arrange_weights_host(src, rows, cols - 64, WeightLayout::tiled));  // element count mismatch
}

// The reference against a straightforward double-precision recomputation.
TEST(Reference, AgreesWithDoublePrecision) {
  for (bool w_in_1 : {false, true}) {
    auto w = make_workload(tiny(DType::f16), 5, {.seed = 12});
    ASSERT_TRUE(w);
    const ReferenceOutput r = reference_layer(*w, {.weight_in_stage1 = w_in_1});
    const Problem& p = w->problem;
    for (int t = 0; t < 5; ++t)
      for (int c = 0; c < p.hidden; ++c) {
        double y = 0;
        for (int s = 0; s < p.topk; ++s) {
          const int e = w->topk_ids[std::size_t(t * p.topk + s)];
          const double rw = w->topk_weights[std::size_t(t * p.topk + s)];
          double acc = 0;
          for (int i = 0; i < p.inter; ++i) {
            double gate = 0, up = 0;
            for (int h = 0; h < p.hidden; ++h) {
              const double x = f16_bits_to_f32(w->x[std::size_t(t * p.hidden + h)]);
              gate += x * f16_bits_to_f32(w->w1[std::size_t((e * 2 * p.inter + i) * p.hidden + h)]);
              up += x * f16_bits_to_f32(w->w1[std::size_t((e * 2 * p.inter + p.inter + i) * p.hidden + h)]);
            }
            acc += gate / (1 + std::exp(-gate)) * up * f16_bits_to_f32(w->w2[std::size_t((e * p.hidden + c) * p.inter + i)]);
          }
          y += acc * rw;
        }
        ASSERT_NEAR(r.y[std::size_t(t * p.hidden + c)], y, 2e-3 * (1 + std::abs(y))) << t << ", " << c;
      }
  }
}

TEST(Reference, AlignPadsEachExpertToWholeBlocks) {
  auto w = make_workload(tiny(), 7, {.seed = 1, .empty_experts = 2});
  ASSERT_TRUE(w);
  const AlignReference a = reference_align(*w, 16);
  EXPECT_EQ(a.padded_rows % 16, 0);
  int pairs = 0;
  for (int e = 0; e < 8; ++e) {
    const int n = int(a.expert_pairs[std::size_t(e)].size());
    pairs += n;
    EXPECT_EQ(a.expert_offset[std::size_t(e) + 1] - a.expert_offset[std::size_t(e)], (n + 15) / 16 * 16);
  }
  EXPECT_EQ(pairs, 14);
  EXPECT_EQ(int(a.block_experts.size()), a.padded_rows / 16);
}

}  // namespace
}  // namespace ft
