// The search strategies (search/strategy_*.cpp) run by the real step
// (StageStep::rank, which records and resumes timings through the Recorder)
// on a fake measurer whose times are made up: what each strategy times, with
// how many repetitions, in which order, and which candidate wins. The fake's
// short timings (5 repetitions) are noisy on purpose, so a strategy that
// trusted them would pick the wrong winner.
#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "store/store.hpp"
#include "generator/problem.hpp"
#include "generator/space.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "search/measurer.hpp"
#include "search/recorder.hpp"
#include "search/steps.hpp"
#include "search/strategy.hpp"

namespace ft {
namespace {

struct Call {
  std::string entry;
  int reps = 0;
  bool operator==(const Call&) const = default;
};

// A Measurer with made-up times: `truth` at 10 and 30 repetitions, `truth +
// short_noise` at 5; entries in `broken` fail as a hung kernel would.
class FakeMeasurer final : public Measurer {
 public:
  std::map<std::string, double> truth, short_noise;
  std::set<std::string> broken;
  std::vector<Call> calls;
  int stop_after = -1;  // stopped() once this many timings were asked for

  Result<DeviceInfo> start() override { return DeviceInfo{}; }
  Status open(const protocol::OpenRequest&) override { return {}; }
  Status set_inputs(const protocol::InputsRequest&) override { return {}; }
  Result<protocol::VerifyAnswer> verify(const protocol::VerifyRequest&) override { return protocol::VerifyAnswer{true}; }
  Result<Timing> time(const protocol::TimeRequest& r) override {
    calls.push_back({r.kernel.entry, r.reps});
    if (broken.contains(r.kernel.entry)) return fail(Errc::timeout, "no answer within 120000 ms; the worker was killed");
    const double t = truth.at(r.kernel.entry) + (r.reps == kShortReps ? short_noise[r.kernel.entry] : 0.0);
    return Timing{t, t * 0.99, t * 1.01, t * 0.98, r.reps};
  }
  Result<protocol::VerifyAnswer> verify_program(const protocol::VerifyProgramRequest&) override {
    return fail(Errc::internal, "not in this test");
  }
  Result<ProgramTiming> time_program(const protocol::TimeProgramRequest&) override {
    return fail(Errc::internal, "not in this test");
  }
  TelemetryReading telemetry() override { return {}; }
  const std::string& selector() const override { return selector_; }
  std::size_t crashes() const override { return 0; }
  bool dead() const override { return false; }
  bool stopped() const override { return stop_after >= 0 && int(calls.size()) >= stop_after; }

  std::vector<Call> calls_with(int reps) const {
    std::vector<Call> out;
    for (const Call& c : calls)
      if (c.reps == reps) out.push_back(c);
    return out;
  }

 private:
  std::string selector_ = "fake:0";
};

class StrategyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cfg_.problem = *problem_from_preset("tiny");
    cfg_.progress = false;
    auto store = db::Store::open(dir_.file("s.db"));
    ASSERT_TRUE(store) << store.error().describe();
    rec_ = std::make_unique<Recorder>(std::move(*store), summary_);
    DeviceInfo info;
    info.runtime = "cuda";
    info.name = "Fake H200";
    info.arch = "sm_90a";
    info.pci_bus_id = "fake:0";
    auto run = rec_->begin_run(db::RunRecord::for_this_build("test", "test", {}));
    auto device = rec_->device(db::DeviceRecord::from(info));
    auto toolchain = rec_->toolchain({0, "nvrtc", "13.0", ""});
    auto problem = rec_->problem(db::ProblemRecord::from(cfg_.problem));
    for (const auto* id : {&run, &device, &toolchain, &problem}) ASSERT_TRUE(*id) << id->error().describe();
    ctx_.emplace(GpuContext{fake_, info, *run, *problem, *device, *toolchain, *rec_});

    // Ten stage-1 variants of the small space; the true times rise with the
    // index (10 us + i), except that the fifth is the fastest (5 us). At 5
    // repetitions the last three look fastest (8, 9, 10 us), the fifth only
    // third (9.5 us) and the first slowest (30 us).
    const Space space = enumerate_space(*find_target("sm_90a"), cfg_.problem, *SpaceOptions::parse("small"));
    for (const Variant& v : space.legal)
      if (v.role == StageRole::stage1 && variants_.size() < 10) variants_.push_back({v, {}});
    ASSERT_EQ(variants_.size(), 10u);
    for (std::size_t i = 0; i < variants_.size(); ++i) {
      const Variant& v = variants_[i].variant;
      db::VariantRecord row;
      row.kernel_name = v.name();
      row.target = "sm_90a";
      row.kind = "moe1";
      row.toolchain_id = *toolchain;
      auto id = rec_->variant(row);
      ASSERT_TRUE(id) << id.error().describe();
      candidates_.push_back({&variants_[i], *id, {v, "/nonexistent/" + v.name(), v.name()}});
      fake_.truth[v.name()] = i == 4 ? 5.0 : 10.0 + double(i);
      fake_.short_noise[v.name()] = i == 0 ? 20.0 : i == 4 ? 4.5 : i >= 7 ? -9.0 : 0.0;
    }
  }

  std::string name(std::size_t i) const { return variants_[i].variant.name(); }

  Result<std::optional<Ranked>> rank(std::string_view strategy, StrategyOptions options = {}, std::uint64_t seed = 5) {
    auto s = make_strategy(strategy, options);
    if (!s) return std::unexpected(s.error());
    return rank(**s, seed);
  }
  Result<std::optional<Ranked>> rank(Strategy& s, std::uint64_t seed = 5) {
    StageStep step{cfg_, *find_target("sm_90a"), *ctx_, candidates_, std::mt19937_64(seed), false};
    return step.rank(s, StageRole::stage1, 64, {});
  }

  std::vector<db::MeasurementRecord> rows(const std::string& phase) {
    db::MeasurementFilter f;
    auto all = rec_->measurements(f);
    std::vector<db::MeasurementRecord> out;
    for (const auto& m : *all)
      if (m.phase == phase) out.push_back(m);
    return out;
  }

  test::ScratchDir dir_;
  SearchConfig cfg_;
  SearchSummary summary_;
  std::unique_ptr<Recorder> rec_;
  FakeMeasurer fake_;
  std::optional<GpuContext> ctx_;
  std::vector<CompiledVariant> variants_;
  std::vector<Candidate> candidates_;
};

TEST_F(StrategyTest, ExhaustiveTimesEveryCandidateOnceAtLength) {
  auto r = rank("exhaustive");
  ASSERT_TRUE(r && *r) << (r ? "stopped" : r.error().describe());
  std::vector<Call> expected;
  for (std::size_t i = 0; i < 10; ++i) expected.push_back({name(i), kLongReps});
  EXPECT_EQ(fake_.calls, expected);
  ASSERT_EQ((*r)->size(), 10u);
  EXPECT_EQ((*r)->front().second->kernel.entry, name(4));
  EXPECT_DOUBLE_EQ((*r)->front().first, 5.0);
  EXPECT_TRUE(std::is_sorted((*r)->begin(), (*r)->end(), [](auto& a, auto& b) { return a.first < b.first; }));
  EXPECT_EQ(rows("long").size(), 10u);
  EXPECT_EQ(summary_.measurements, 10u);
}

TEST_F(StrategyTest, HalvingScreensShortThenTimesTheBestQuarterThenInterleavesTheTopThree) {
  auto r = rank("halving");
  ASSERT_TRUE(r && *r) << (r ? "stopped" : r.error().describe());
  // 1. every candidate at 5 repetitions, in the space's order.
  std::vector<Call> shorts;
  for (std::size_t i = 0; i < 10; ++i) shorts.push_back({name(i), kShortReps});
  EXPECT_EQ(fake_.calls_with(kShortReps), shorts);
  // 2. the best quarter by those (three of ten: 7, 8 and 4, the noise
  //    flattering the first two) at 30, in the screen's order.
  EXPECT_EQ(fake_.calls_with(kLongReps), (std::vector<Call>{{name(7), kLongReps}, {name(8), kLongReps}, {name(4), kLongReps}}));
  // 3. the three by those times (4, 7, 8) in three interleaved rounds at 10: A B C, B C A, C A B.
  const std::string a = name(4), b = name(7), c = name(8);
  EXPECT_EQ(fake_.calls_with(kAbReps), (std::vector<Call>{{a, 10}, {b, 10}, {c, 10}, {b, 10}, {c, 10}, {a, 10},
                                                          {c, 10}, {a, 10}, {b, 10}}));
  EXPECT_EQ(fake_.calls.size(), 10u + 3u + 9u);
  // The winner is the best of the rounds (not the screen's best), each recorded once as "ab".
  // Then the other seven by their screen, so the layer step can reach further
  // down for a stage that fits the other's.
  ASSERT_EQ((*r)->size(), 10u);
  EXPECT_EQ((*r)->front().second->kernel.entry, name(4));
  EXPECT_DOUBLE_EQ((*r)->front().first, 5.0);
  EXPECT_EQ((*r)->at(2).second->kernel.entry, name(8));
  std::set<std::string> rest;
  for (std::size_t i = 3; i < 10; ++i) rest.insert((*r)->at(i).second->kernel.entry);
  EXPECT_EQ(rest.size(), 7u);
  for (const std::string& top : {a, b, c}) EXPECT_FALSE(rest.contains(top)) << top;
  EXPECT_TRUE(std::is_sorted((*r)->begin() + 3, (*r)->end(), [](auto& x, auto& y) { return x.first < y.first; }));
  EXPECT_EQ(rows("ab").size(), 3u);
  EXPECT_EQ(rows("short").size(), 10u);
  EXPECT_EQ(rows("long").size(), 3u);
}

TEST_F(StrategyTest, HalvingFindsTheFastestWhenTheScreenDoesNotHideIt) {
  fake_.short_noise.clear();  // the 5-repetition screen tells the truth
  auto r = rank("halving");
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->front().second->kernel.entry, name(4));
  EXPECT_DOUBLE_EQ((*r)->front().first, 5.0);
  // The best quarter by the screen: 4, 0, 1 (times 5, 10, 11).
  EXPECT_EQ(fake_.calls_with(kLongReps), (std::vector<Call>{{name(4), kLongReps}, {name(0), kLongReps}, {name(1), kLongReps}}));
}

TEST_F(StrategyTest, RandomTimesASeededSampleOfTheBudget) {
  auto r = rank("random", {3, 0}, 11);
  ASSERT_TRUE(r && *r);
  ASSERT_EQ(fake_.calls.size(), 3u);
  std::set<std::string> sampled;
  for (const Call& c : fake_.calls) {
    EXPECT_EQ(c.reps, kLongReps);
    sampled.insert(c.entry);
  }
  EXPECT_EQ(sampled.size(), 3u) << "a candidate sampled twice";
  // The winner is the best of the sample.
  double best = 1e9;
  for (const std::string& e : sampled) best = std::min(best, fake_.truth.at(e));
  EXPECT_DOUBLE_EQ((*r)->front().first, best);
  // The same seed, the same sample (a fresh store, so nothing is resumed).
  const std::vector<Call> first = fake_.calls;
  fake_.calls.clear();
  cfg_.force = true;
  ASSERT_TRUE(rank("random", {3, 0}, 11));
  EXPECT_EQ(fake_.calls, first);
  fake_.calls.clear();
  ASSERT_TRUE(rank("random", {3, 0}, 12));
  EXPECT_NE(fake_.calls, first) << "another seed, the same sample";
  // No budget: everything, once.
  fake_.calls.clear();
  auto all = rank("random", {0, 0}, 11);
  ASSERT_TRUE(all && *all);
  EXPECT_EQ(fake_.calls.size(), 10u);
  EXPECT_EQ((*all)->front().second->kernel.entry, name(4));
}

TEST_F(StrategyTest, ARerunTakesTheTimingsFromTheStoreAndForceMeasuresAgain) {
  ASSERT_TRUE(rank("exhaustive"));
  fake_.calls.clear();
  auto again = rank("exhaustive");
  ASSERT_TRUE(again && *again);
  EXPECT_TRUE(fake_.calls.empty()) << fake_.calls.size() << " timings measured again";
  EXPECT_EQ(summary_.resumed, 10u);
  EXPECT_EQ((*again)->front().second->kernel.entry, name(4));
  // A long timing serves a short one; the interleaved rounds are always measured.
  auto halving = rank("halving");
  ASSERT_TRUE(halving && *halving);
  EXPECT_EQ(fake_.calls_with(kShortReps).size(), 0u);
  EXPECT_EQ(fake_.calls_with(kAbReps).size(), 9u);
  cfg_.force = true;
  fake_.calls.clear();
  ASSERT_TRUE(rank("exhaustive"));
  EXPECT_EQ(fake_.calls.size(), 10u);
}

TEST_F(StrategyTest, AFailedTimingIsRecordedAndLeftOutOfTheRanking) {
  fake_.broken = {name(4)};
  auto r = rank("exhaustive");
  ASSERT_TRUE(r && *r);
  EXPECT_EQ((*r)->size(), 9u);
  EXPECT_EQ((*r)->front().second->kernel.entry, name(0));
  bool recorded = false;
  for (const auto& m : rows("long"))
    if (m.variant_id == candidates_[4].id) {
      recorded = true;
      EXPECT_EQ(m.status, db::MeasurementStatus::timeout);
      EXPECT_NE(m.error_message.find("no answer"), std::string::npos);
    }
  EXPECT_TRUE(recorded);
}

TEST_F(StrategyTest, AStoppedDeviceEndsTheRankingWithoutAnswer) {
  for (std::string_view s : {"exhaustive", "halving", "random"}) {
    SCOPED_TRACE(std::string(s));
    fake_.calls.clear();
    fake_.stop_after = 4;
    cfg_.force = true;
    auto r = rank(s);
    ASSERT_TRUE(r);
    EXPECT_FALSE(*r) << "a ranking from a stopped device";
    EXPECT_EQ(fake_.calls.size(), 4u);
  }
}

// What a model-guided strategy needs of the interface: the candidates'
// compile facts, their earlier measurements, and a subset of its own choice
// timed with repetitions of its own choice.
class PickByHistory final : public Strategy {
 public:
  std::vector<std::size_t> history;
  std::optional<Ranked> rank(const std::vector<const Candidate*>& pool, const StageQuery& q, StageTimer& timer) override {
    EXPECT_EQ(q.kind, StageRole::stage1);
    EXPECT_EQ(q.tokens, 64);
    Ranked out;
    int narrowest = 1 << 30;
    for (const Candidate* c : pool) narrowest = std::min(narrowest, c->cv->variant.get("tile_n"));
    for (const Candidate* c : pool) {
      history.push_back(timer.earlier(*c).size());
      if (c->cv->variant.get("tile_n") == narrowest)
        if (auto t = timer.time(*c, "long", 7)) out.emplace_back(*t, c);
    }
    sort_fastest_first(out);
    return out;
  }
};

TEST_F(StrategyTest, AStrategySeesCompileFactsAndEarlierMeasurementsAndPicksWhatToTime) {
  ASSERT_TRUE(rank("exhaustive"));
  PickByHistory mine;
  fake_.calls.clear();
  cfg_.force = true;
  auto r = rank(mine);
  ASSERT_TRUE(r && *r);
  EXPECT_EQ(mine.history, std::vector<std::size_t>(10, 1u));  // each candidate's one earlier timing
  int narrowest = 1 << 30;
  std::set<std::string> expected;
  for (const CompiledVariant& cv : variants_) narrowest = std::min(narrowest, cv.variant.get("tile_n"));
  for (const CompiledVariant& cv : variants_)
    if (cv.variant.get("tile_n") == narrowest) expected.insert(cv.variant.name());
  std::set<std::string> timed;
  for (const Call& c : fake_.calls) {
    EXPECT_EQ(c.reps, 7);
    timed.insert(c.entry);
  }
  EXPECT_EQ(timed, expected);
  EXPECT_EQ((*r)->size(), expected.size());
}

TEST(StrategyRegistry, NamesHelpAndRefusalsComeFromTheTable) {
  EXPECT_EQ(default_strategy(), "halving");
  EXPECT_EQ(strategy_names(), "halving, exhaustive, random or model");
  const std::string help = strategy_help();
  for (const StrategyInfo& s : strategies()) {
    EXPECT_NE(help.find(std::string(s.name) + (s.name == default_strategy() ? " (default): " : ": ")), std::string::npos)
        << help;
    EXPECT_TRUE(make_strategy(s.name, {})) << s.name;
  }
  auto bad = make_strategy("psychic", {});
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::usage);
  EXPECT_EQ(bad.error().message, "unknown strategy 'psychic'; use halving, exhaustive, random or model");
}

}  // namespace
}  // namespace ft
