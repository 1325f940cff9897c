// The cost model: features taken generically from the variant's JSON and
// resources and from the layer program's launch; a fit on a synthetic
// database whose times follow a known law ranks every held-out bucket right,
// and the same check fails when a feature the law depends on is broken; a
// variant's own residual carries over to the token counts it was not timed at.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/space.hpp"
#include "layer/program.hpp"
#include "tests/unit/search/model_test_support.hpp"
#include "search/cost_model.hpp"

namespace ft {
namespace {

using model::CostModel;
using model::Dataset;

struct HeldOut {
  double spearman = 0;
  std::size_t winner_rank = 0;  // 1: predicted fastest
  double log_rmse = 0;          // of predicted over measured times
};

HeldOut predict_bucket(const Dataset& d, int tokens, const model::ModelOptions& opt = {}) {
  std::vector<std::size_t> held, rest;
  test::split_bucket(d, tokens, held, rest);
  auto m = CostModel::fit(d, rest, opt);
  EXPECT_TRUE(m) << m.error().describe();
  if (!m) return {};
  std::vector<double> pred, meas;
  for (std::size_t i : held) {
    pred.push_back(m->predict_us(d, d.samples[i].at));
    meas.push_back(d.samples[i].time_us);
  }
  const std::size_t win = std::size_t(std::min_element(meas.begin(), meas.end()) - meas.begin());
  std::size_t rank = 1;
  for (double p : pred) rank += p < pred[win] ? 1 : 0;
  double sq = 0;
  for (std::size_t i = 0; i < pred.size(); ++i) sq += std::pow(std::log(pred[i] / meas[i]), 2);
  return {model::spearman(pred, meas), rank, std::sqrt(sq / double(pred.size()))};
}

// The check every fit of the features alone (no transfer, which would carry
// a lost feature's effect over from the other buckets) must pass: each
// bucket predicted from the others is
// ranked with a rank correlation of at least 0.95 and its winner among the
// predicted three fastest.
bool ranks_every_bucket_right(const Dataset& d, std::string& detail) {
  bool ok = true;
  for (int t : std::vector<int>{1, 16, 64, 512, 4096, 16384}) {
    const HeldOut h = predict_bucket(d, t, {.features = true, .transfer = false});
    detail += "T=" + std::to_string(t) + ": rho " + std::to_string(h.spearman) + ", winner #" +
              std::to_string(h.winner_rank) + "\n";
    ok = ok && h.spearman >= 0.95 && h.winner_rank <= 3;
  }
  return ok;
}

struct LawCase {
  const char* name;
  std::function<void(nlohmann::json&, db::Resources&)> mutate;
  bool ranks_right;
};

class FitOfALaw : public ::testing::TestWithParam<LawCase> {};

TEST_P(FitOfALaw, RanksHeldOutBucketsRightOnlyWithEveryFeature) {
  test::SyntheticOptions opt;
  opt.mutate = GetParam().mutate;
  const Dataset d = test::synthetic_dataset(opt);
  std::string detail;
  EXPECT_EQ(ranks_every_bucket_right(d, detail), GetParam().ranks_right) << detail;
}

INSTANTIATE_TEST_SUITE_P(
    Features, FitOfALaw,
    ::testing::Values(
        LawCase{"all", nullptr, true},
        // A new field the law does not depend on changes nothing.
        LawCase{"extra_field", [](nlohmann::json& j, db::Resources&) { j["family"] = {{"name", "tiled"}, {"depth", 3}}; }, true},
        LawCase{"string_dropped", [](nlohmann::json& j, db::Resources&) { j.erase("mode"); }, false},
        LawCase{"number_dropped", [](nlohmann::json& j, db::Resources&) { j.erase("tile"); }, false},
        LawCase{"number_constant", [](nlohmann::json& j, db::Resources&) { j["stages"] = 2; }, false},
        LawCase{"boolean_dropped", [](nlohmann::json& j, db::Resources&) { j.erase("flag"); }, false},
        LawCase{"resource_dropped", [](nlohmann::json&, db::Resources& r) { r.occupancy.reset(); }, false}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(CostModel, LearnsTheTokenCountsAbsoluteScale) {
  const Dataset d = test::synthetic_dataset();
  std::vector<std::size_t> held, rest;
  test::split_bucket(d, 512, held, rest);
  auto m = CostModel::fit(d, rest);
  ASSERT_TRUE(m) << m.error().describe();
  // Interpolated between 64 and 4096: within 25% of every measured time.
  for (std::size_t i : held) EXPECT_NEAR(std::log(m->predict_us(d, d.samples[i].at) / d.samples[i].time_us), 0, 0.25);
  EXPECT_EQ(m->report().samples, rest.size());
  EXPECT_EQ(m->report().buckets, 5u);
  EXPECT_EQ(m->report().cv_buckets, 5u);
  EXPECT_GT(m->report().cv_spearman, 0.95);
  EXPECT_GT(m->report().lambda, 0);
}

TEST(CostModel, CarriesAVariantsOwnResidualAcrossTokenCounts) {
  // Each variant has an effect no feature shows: only its timings at other T say it.
  test::SyntheticOptions opt;
  opt.own_spread = 0.7;
  const Dataset d = test::synthetic_dataset(opt);
  for (int t : {16, 512, 16384}) {
    const HeldOut with = predict_bucket(d, t, {true, true});
    const HeldOut without = predict_bucket(d, t, {true, false});
    EXPECT_GE(with.spearman, 0.98) << "T=" << t;
    EXPECT_LT(with.log_rmse, 0.5 * without.log_rmse) << "T=" << t;
    EXPECT_LE(with.winner_rank, 2u) << "T=" << t;
  }
}

TEST(CostModel, WithoutTheVariantsFeaturesOnlyTransferRanks) {
  // Bucket features alone cannot tell variants apart: the transfer does.
  const Dataset d = test::synthetic_dataset();
  const HeldOut none = predict_bucket(d, 512, {false, false});
  const HeldOut transfer = predict_bucket(d, 512, {false, true});
  EXPECT_NEAR(none.spearman, 0, 0.2);
  EXPECT_GT(transfer.spearman, 0.8);
}

TEST(CostModel, RefusesAnEmptyDataset) {
  Dataset d;
  d.kind = "moe1";
  d.device_name = "Test GPU";
  auto m = CostModel::fit(d);
  ASSERT_FALSE(m);
  EXPECT_EQ(m.error().code, Errc::invalid_input);
  EXPECT_NE(m.error().message.find("no moe1 timings on Test GPU"), std::string::npos) << m.error().message;
}

TEST(CostModel, OneBucketGivesNoCrossValidation) {
  test::SyntheticOptions opt;
  opt.tokens = {64};
  auto m = CostModel::fit(test::synthetic_dataset(opt));
  ASSERT_TRUE(m) << m.error().describe();
  EXPECT_EQ(m->report().buckets, 1u);
  EXPECT_EQ(m->report().cv_buckets, 0u);
}

TEST(Features, EveryJsonLeafIsAFeature) {
  Dataset d = test::synthetic_dataset();
  d.variants[1].params = {{"tile", 64},         {"ratio", -3.0},   {"on", true},        {"atom", "mma"},
                          {"nested", {{"depth", 7}, {"name", "x"}}}, {"list", {2, "y"}}, {"none", nullptr}};
  const auto f = model::features_of(d, {1, 1, 1, 64});
  EXPECT_DOUBLE_EQ(f.at("param.tile"), std::log2(65.0));
  EXPECT_DOUBLE_EQ(f.at("param.ratio"), -2.0);
  EXPECT_DOUBLE_EQ(f.at("param.on"), 1.0);
  EXPECT_DOUBLE_EQ(f.at("param.atom=mma"), 1.0);
  EXPECT_DOUBLE_EQ(f.at("param.nested.depth"), 3.0);
  EXPECT_DOUBLE_EQ(f.at("param.nested.name=x"), 1.0);
  EXPECT_DOUBLE_EQ(f.at("param.list[0]"), std::log2(3.0));
  EXPECT_DOUBLE_EQ(f.at("param.list[1]=y"), 1.0);
  EXPECT_DOUBLE_EQ(f.at("has.param.tile"), 1.0);
  EXPECT_FALSE(f.contains("param.none"));
  EXPECT_DOUBLE_EQ(f.at("res.occupancy"), std::log2(1.0 + *d.variants[1].resources.occupancy));
  EXPECT_DOUBLE_EQ(f.at("bucket.log2_tokens"), 6.0);
  EXPECT_DOUBLE_EQ(f.at("bucket.log2_experts"), 3.0);
  EXPECT_DOUBLE_EQ(f.at("bucket.routing=uniform"), 1.0);
  EXPECT_FALSE(f.contains("has.launch"));  // the made-up target has no layer program
}

// A real variant: the launch features are the layer program's grid over the device's SMs.
TEST(Features, LaunchFactsComeFromTheLayerProgram) {
  const Target* t = find_target("sm_90a");
  ASSERT_NE(t, nullptr);
  Dataset d = test::synthetic_dataset();
  const Problem p = [] {
    Problem q;
    q.experts = 8, q.hidden = 4096, q.inter = 14336, q.topk = 2;
    return q;
  }();
  for (StageRole kind : {StageRole::stage1, StageRole::stage2}) {
    auto v = default_variant(*t, p, kind);
    ASSERT_TRUE(v) << v.error().describe();
    d.variants[1].target = "sm_90a";
    d.variants[1].params = v->to_json();
    d.variants[1].resources.occupancy = 2;
    for (int tokens : {1, 4096}) {
      const auto f = model::features_of(d, {1, 1, 1, tokens});
      const LaunchShape s = stage_launch(*v, p, tokens, v->get("tile_m"));
      const double blocks = double(s.grid_x) * s.grid_y * s.grid_z;
      ASSERT_TRUE(f.contains("has.launch")) << v->name();
      EXPECT_DOUBLE_EQ(f.at("launch.log2_blocks"), std::log2(blocks)) << v->name();
      EXPECT_DOUBLE_EQ(f.at("launch.log2_threads"), std::log2(double(v->threads())));
      const double per_sm = std::max(1, 2 * t->simds_per_cu / (v->threads() / t->wave_size));
      const double waves = blocks * f.at("launch.active_share") / (132 * per_sm);
      EXPECT_NEAR(f.at("launch.log2_waves"), std::log2(waves), 1e-9);
      EXPECT_GT(f.at("launch.active_share"), 0);
      EXPECT_LE(f.at("launch.active_share"), 1);
      EXPECT_GE(f.at("launch.log2_pad_ratio"), 0);  // rows never fewer than routed pairs
      const double n = kind == StageRole::stage1 ? 2.0 * p.inter : p.hidden, k = kind == StageRole::stage1 ? p.hidden : p.inter;
      EXPECT_NEAR(f.at("bucket.log2_flops"), std::log2(2.0 * tokens * p.topk * n * k), 1e-9);
    }
    d.variants[1].resources.occupancy.reset();  // no occupancy: no waves
    EXPECT_FALSE(model::features_of(d, {1, 1, 1, 64}).contains("launch.log2_waves"));
  }
}

struct RankCase {
  std::vector<double> a, b;
  double rho;
};
class Spearman : public ::testing::TestWithParam<RankCase> {};
TEST_P(Spearman, OfRanks) { EXPECT_NEAR(model::spearman(GetParam().a, GetParam().b), GetParam().rho, 1e-12); }
INSTANTIATE_TEST_SUITE_P(Cases, Spearman,
                         ::testing::Values(RankCase{{1, 2, 3}, {10, 20, 30}, 1.0}, RankCase{{1, 2, 3}, {3, 2, 1}, -1.0},
                                           RankCase{{1, 2, 3, 4}, {1, 100, 2, 3}, 0.4}, RankCase{{1}, {1}, 0.0},
                                           RankCase{{1, 1, 1}, {1, 2, 3}, 0.0}, RankCase{{1, 2, 2, 3}, {1, 2, 2, 3}, 1.0}));

}  // namespace
}  // namespace ft
