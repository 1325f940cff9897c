// The layer step's pairing (search/steps.cpp): which stage pairs it times as
// layers, by the layer program's rule of which pairs fit (pair_fits), and the
// step itself on a fake measurer: a bucket whose fastest stage 1 and stage 2
// do not fit together still gets a layer winner, and one where no pair fits
// ends in the summary's missing layers.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "generator/atoms.hpp"
#include "generator/families/families.hpp"
#include "generator/problem.hpp"
#include "layer/program.hpp"
#include "search/measurer.hpp"
#include "search/recorder.hpp"
#include "search/steps.hpp"
#include "store/store.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

Problem mixtral() { return *problem_from_preset("mixtral-8x7b"); }
const Target& sm90() { return *find_target("sm_90a"); }

// A wgmma stage variant of `tile_m` rows (a warpgroup per 64 rows), told apart by tile_n.
Variant wgmma(StageRole kind, int tile_m, int tile_n = 128, bool weight_in_stage1 = false) {
  Variant v = Variant::of(sm90(), kind, *find_atom("wgmma_m64k16_f32_bf16"));
  v.set("tile_m", tile_m).set("tile_n", tile_n).set("tile_k", 64).set("warps_m", tile_m / 16).set("warps_n", 1).set("stages", 4);
  v.set("weight_in_stage1", weight_in_stage1);
  return v;
}

struct Stage {
  int tile_m;
  double us;
  bool weight_in_stage1 = false;
};

// Candidates of one stage kind, fastest first as a strategy ranks them.
struct RankedStage {
  std::vector<CompiledVariant> variants;
  std::vector<Candidate> candidates;
  Ranked ranked;

  RankedStage(StageRole kind, const std::vector<Stage>& stages) {
    variants.reserve(stages.size());
    candidates.reserve(stages.size());
    for (std::size_t i = 0; i < stages.size(); ++i) {
      variants.push_back({wgmma(kind, stages[i].tile_m, i % 2 ? 64 : 128, stages[i].weight_in_stage1), {}});
      // Distinct names for the fake measurer: the index in the kernel entry.
      candidates.push_back({&variants.back(), std::int64_t(i + 1), {}});
      candidates.back().kernel.entry = fmt::format("{}#{}", variants.back().variant.name(), i);
    }
    for (std::size_t i = 0; i < stages.size(); ++i) ranked.emplace_back(stages[i].us, &candidates[i]);
  }
};

std::vector<Stage> many(int tile_m, int n, double from) {
  std::vector<Stage> out;
  for (int i = 0; i < n; ++i) out.push_back({tile_m, from + 0.1 * i});
  return out;
}
std::vector<Stage> operator+(std::vector<Stage> a, const std::vector<Stage>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// The layer program's rule, which the search pairs by: row blocks of at most
// 256 rows (the least common multiple of the tiles) and the routed weight
// applied in the same stage by both.
TEST(PairFits, IsTheLayerProgramsRule) {
  struct Case {
    int m1, m2;
    bool w1, w2;
    const char* refusal;  // "" when it fits
  };
  for (const Case& c : {Case{192, 64, false, false, ""}, Case{192, 192, false, false, ""}, Case{128, 128, false, false, ""},
                        Case{64, 128, false, false, ""}, Case{192, 128, false, false, "384"},
                        Case{128, 192, false, false, "384"}, Case{64, 64, true, false, "routed weight"}}) {
    SCOPED_TRACE(fmt::format("{} + {}", c.m1, c.m2));
    const Variant a = wgmma(StageRole::stage1, c.m1, 128, c.w1), b = wgmma(StageRole::stage2, c.m2, 128, c.w2);
    const Status fits = pair_fits(sm90(), mixtral(), a, b);
    EXPECT_EQ(fits.has_value(), std::string(c.refusal).empty());
    if (!fits) {
      EXPECT_NE(fits.error().message.find(c.refusal), std::string::npos) << fits.error().message;
    }
    // The same answer as building the layer.
    EXPECT_EQ(build_program(LayerRecipe{&sm90(), mixtral(), {a, b}}, 512).has_value(), fits.has_value());
  }
}

std::vector<std::pair<int, int>> tiles(const LayerPairs& p) {
  std::vector<std::pair<int, int>> out;
  for (const auto& [a, b] : p.pairs) out.emplace_back(a->cv->variant.get("tile_m"), b->cv->variant.get("tile_m"));
  return out;
}

TEST(LayerPairs, RankFittingPairsBySummedStageTimes) {
  struct Case {
    const char* name;
    std::vector<Stage> s1, s2;
    std::vector<std::pair<int, int>> first;  // the leading pairs, in order
    std::size_t count;                       // pairs in all
  };
  const std::vector<Case> cases{
      {"the fastest stages fit", {{128, 1}, {64, 2}}, {{128, 1}, {64, 3}}, {{128, 128}, {64, 128}, {128, 64}}, 4},
      // The T=16384: every stage 1 in the top five has 192-row tiles,
      // every stage 2 128-row ones; a 192 with a 64 and a 128 with a 128 fit.
      {"the fastest stages do not fit",
       many(192, 6, 1.0) + std::vector<Stage>{{128, 3.5}},
       many(128, 6, 1.0) + std::vector<Stage>{{64, 3.0}, {192, 4.0}},
       {{192, 64}, {128, 128}, {192, 192}},
       3},
      {"one class of each, far down the lists", many(192, 7, 1.0) + std::vector<Stage>{{64, 9}}, many(128, 7, 1.0),
       {{64, 128}}, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RankedStage s1(StageRole::stage1, c.s1), s2(StageRole::stage2, c.s2);
    const LayerPairs p = layer_pairs(sm90(), mixtral(), s1.ranked, s2.ranked);
    const auto got = tiles(p);
    ASSERT_GE(got.size(), c.first.size());
    EXPECT_EQ(std::vector(got.begin(), got.begin() + std::ptrdiff_t(c.first.size())), c.first);
    EXPECT_EQ(got.size(), c.count);
    for (const auto& [a, b] : p.pairs) EXPECT_TRUE(pair_fits(sm90(), mixtral(), a->cv->variant, b->cv->variant));
    // No pair twice.
    auto sorted = p.pairs;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  }
}

TEST(LayerPairs, AtMostNinePairsAndEmptyOnlyWhenNothingFits) {
  RankedStage s1(StageRole::stage1, many(128, 8, 1.0)), s2(StageRole::stage2, many(64, 8, 1.0));
  EXPECT_EQ(layer_pairs(sm90(), mixtral(), s1.ranked, s2.ranked).pairs.size(), 9u);
  RankedStage n1(StageRole::stage1, many(192, 8, 1.0)), n2(StageRole::stage2, many(128, 8, 1.0));
  const LayerPairs none = layer_pairs(sm90(), mixtral(), n1.ranked, n2.ranked);
  EXPECT_TRUE(none.pairs.empty());
  EXPECT_NE(none.skipped.find("384"), std::string::npos) << none.skipped;
  // The routed weight's placement is part of the rule.
  RankedStage w1(StageRole::stage1, {{64, 1, true}, {64, 5, false}}), w2(StageRole::stage2, {{64, 1, false}});
  EXPECT_EQ(layer_pairs(sm90(), mixtral(), w1.ranked, w2.ranked).pairs.size(), 1u);
}

// A stage 2 that writes Y (reduce=atomic_y) is slower alone than the plain
// ones but saves the layer's reduce launch: its best is paired and timed as a
// layer even when nine faster pairs exist.
TEST(LayerPairs, TheBestStageTwoThatWritesYIsAlwaysPaired) {
  RankedStage s1(StageRole::stage1, many(64, 8, 1.0)), s2(StageRole::stage2, many(64, 8, 1.0) + many(64, 1, 5.0));
  Variant& direct = s2.variants.back().variant;
  direct.set("reduce", int(Reduce::atomic_y));
  s2.candidates.back().kernel.entry = direct.name() + "#y";
  const LayerPairs p = layer_pairs(sm90(), mixtral(), s1.ranked, s2.ranked);
  EXPECT_EQ(p.pairs.size(), 9u);
  const auto y = std::count_if(p.pairs.begin(), p.pairs.end(),
                               [](const auto& pair) { return writes_y(pair.second->cv->variant.contract().output); });
  EXPECT_EQ(y, 1) << "the atomic_y stage 2 was not paired";
  // Without it the nine fastest plain pairs.
  RankedStage plain(StageRole::stage2, many(64, 9, 1.0));
  EXPECT_EQ(layer_pairs(sm90(), mixtral(), s1.ranked, plain.ranked).pairs.size(), 9u);
}

// A Measurer whose layers all verify, and whose layer time is the sum of its
// stages' `us` (so the pairing, not the fake, decides the winner).
class FakeLayerMeasurer final : public Measurer {
 public:
  std::map<std::string, double> us;
  std::vector<std::pair<std::string, std::string>> timed;

  Result<DeviceInfo> start() override { return DeviceInfo{}; }
  Status open(const protocol::OpenRequest&) override { return {}; }
  Status set_inputs(const protocol::InputsRequest&) override { return {}; }
  Result<protocol::VerifyAnswer> verify(const protocol::VerifyRequest&) override { return protocol::VerifyAnswer{true}; }
  Result<Timing> time(const protocol::TimeRequest&) override { return fail(Errc::internal, "not in this test"); }
  Result<protocol::VerifyAnswer> verify_program(const protocol::VerifyProgramRequest&) override {
    return protocol::VerifyAnswer{true, 1e-3, 1e-3, "rel L2 1e-3"};
  }
  // The forward's layers (this fake measures no backward).
  Result<ProgramTiming> time_program(const protocol::TimeProgramRequest& r) override {
    const std::string &e1 = r.program.stages.at(0).entry, &e2 = r.program.stages.at(1).entry;
    timed.emplace_back(e1, e2);
    const double t = us.at(e1) + us.at(e2);
    ProgramTiming out;
    out.total = Timing{t, t * 0.99, t * 1.01, t * 0.98, r.reps};
    return out;
  }
  TelemetryReading telemetry() override { return {}; }
  const std::string& selector() const override { return selector_; }
  std::size_t crashes() const override { return 0; }
  bool dead() const override { return false; }
  bool stopped() const override { return false; }

 private:
  std::string selector_ = "fake:0";
};

class LayerStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_.problem = mixtral();
    cfg_.progress = false;
    auto store = db::Store::open(dir_.file("s.db"));
    ASSERT_TRUE(store) << store.error().describe();
    rec_ = std::make_unique<Recorder>(std::move(*store), summary_);
    DeviceInfo info;
    info.runtime = "cuda";
    info.name = "Fake H200";
    info.arch = "sm_90a";
    auto run = rec_->begin_run(db::RunRecord::for_this_build("test", "test", {}));
    auto device = rec_->device(db::DeviceRecord::from(info));
    auto toolchain = rec_->toolchain({0, "nvrtc", "13.0", ""});
    auto problem = rec_->problem(db::ProblemRecord::from(cfg_.problem));
    for (const auto* id : {&run, &device, &toolchain, &problem}) ASSERT_TRUE(*id) << id->error().describe();
    ctx_.emplace(GpuContext{fake_, info, *run, *problem, *device, *toolchain, *rec_});
  }

  void times_of(const RankedStage& s) {
    for (const auto& [t, c] : s.ranked) {
      fake_.us[c->kernel.entry] = t;
      variant_of_[c->kernel.entry] = &c->cv->variant;
    }
  }
  std::map<std::string, const Variant*> variant_of_;

  test::ScratchDir dir_;
  SearchConfig cfg_;
  SearchSummary summary_;
  std::unique_ptr<Recorder> rec_;
  FakeLayerMeasurer fake_;
  std::optional<GpuContext> ctx_;
  std::optional<Ceilings> ceilings_;
};

TEST_F(LayerStepTest, FastestStagesThatDoNotFitStillGiveALayerWinner) {
  RankedStage s1(StageRole::stage1, many(192, 6, 1.0) + std::vector<Stage>{{128, 3.5}});
  RankedStage s2(StageRole::stage2, many(128, 6, 1.0) + std::vector<Stage>{{64, 3.0}});
  times_of(s1);
  times_of(s2);
  LayerStep step{cfg_, sm90(), *ctx_, ceilings_};
  auto ran = step.run(16384, s1.ranked, s2.ranked, {});
  ASSERT_TRUE(ran && *ran) << (ran ? "stopped" : ran.error().describe());
  EXPECT_TRUE(summary_.missing_layers.empty());
  ASSERT_EQ(summary_.winners.size(), 1u);
  const BucketResult& w = summary_.winners.front();
  EXPECT_EQ(w.kind, "layer");
  EXPECT_EQ(w.tokens, 16384);
  // 192 + 64 (4.0 us) beats 128 + 128 (4.5 us).
  EXPECT_EQ(w.kernel, s1.variants[0].variant.name() + "+" + s2.variants[6].variant.name());
  EXPECT_DOUBLE_EQ(w.median_us, 4.0);
  // Only pairs that fit were timed: both of them.
  EXPECT_EQ(fake_.timed.size(), 2u + 1u);  // two probes, then the winner at length
  for (const auto& [a, b] : fake_.timed) EXPECT_TRUE(pair_fits(sm90(), mixtral(), *variant_of_.at(a), *variant_of_.at(b))) << a << " + " << b;
}

TEST_F(LayerStepTest, NoPairThatFitsIsAMissingLayerWithItsReason) {
  RankedStage s1(StageRole::stage1, many(192, 3, 1.0)), s2(StageRole::stage2, many(128, 3, 1.0));
  LayerStep step{cfg_, sm90(), *ctx_, ceilings_};
  auto ran = step.run(16384, s1.ranked, s2.ranked, {});
  ASSERT_TRUE(ran && *ran);
  EXPECT_TRUE(fake_.timed.empty());
  EXPECT_TRUE(summary_.winners.empty());
  ASSERT_EQ(summary_.missing_layers.size(), 1u);
  EXPECT_EQ(summary_.missing_layers[0].tokens, 16384);
  EXPECT_EQ(summary_.missing_layers[0].device, "Fake H200");
  EXPECT_NE(summary_.missing_layers[0].reason.find("384"), std::string::npos) << summary_.missing_layers[0].reason;
  ASSERT_EQ(summary_.notes.size(), 1u);
  EXPECT_NE(summary_.notes[0].find("T=16384: no layer winner"), std::string::npos) << summary_.notes[0];
}

// The one-launch family beside six faster wgmma stages of each kind: its
// moe1 is paired with its twin (the best of its own class), not with a faster
// one-launch moe2 of other values, and no pair mixes the families.
TEST(LayerPairs, OneLaunchStagesArePairedWithTheirTwinsOnly) {
  auto onelaunch = [](StageRole kind, int tile_n) {
    Variant v = Variant::of(sm90(), kind, *find_atom("mma_m16n8k16_f32_bf16"), &onelaunch_family());
    v.set("ol_blocks", 264).set("tile_m", 16).set("tile_n", tile_n).set("tile_k", 64).set("warps_m", 1).set("warps_n", 2);
    return v;
  };
  struct Kind {
    std::vector<CompiledVariant> variants;
    std::vector<Candidate> candidates;
    Ranked ranked;
  } k1, k2;
  for (Kind* k : {&k1, &k2}) {
    const StageRole role = k == &k1 ? StageRole::stage1 : StageRole::stage2;
    for (int i = 0; i < 6; ++i) k->variants.push_back({wgmma(role, 64, 64 * (1 + i % 3)), {}});
    if (role == StageRole::stage2) k->variants.push_back({onelaunch(role, 32), {}});  // faster than the twin, not a twin
    k->variants.push_back({onelaunch(role, 16), {}});
    for (std::size_t i = 0; i < k->variants.size(); ++i) k->candidates.push_back({&k->variants[i], std::int64_t(i + 1), {}});
    for (std::size_t i = 0; i < k->candidates.size(); ++i) k->ranked.emplace_back(double(i + 1), &k->candidates[i]);
  }
  const LayerPairs pairs = layer_pairs(sm90(), mixtral(), k1.ranked, k2.ranked);
  const Variant twin1 = onelaunch(StageRole::stage1, 16), twin2 = onelaunch(StageRole::stage2, 16);
  bool twins = false;
  for (const auto& [a, b] : pairs.pairs) {
    const Variant &v1 = a->cv->variant, &v2 = b->cv->variant;
    EXPECT_EQ(v1.family, v2.family) << v1.name() << " + " << v2.name();
    twins = twins || (v1 == twin1 && v2 == twin2);
  }
  EXPECT_TRUE(twins) << "the one-launch twins were not paired";
}

}  // namespace
}  // namespace ft
