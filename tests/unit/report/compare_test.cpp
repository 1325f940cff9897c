// compare(): every verdict of the standard pair, breakage details, a database
// against itself, device and toolchain notices, the floor hook, and that the
// inputs are not modified.
#include <gtest/gtest.h>

#include "report/report.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/report/report_test_support.hpp"

namespace ft::db::report {
namespace {

using test::FileSnapshot;
using test::ScratchDir;
using test::TestDb;

const KeyResult* find(const Comparison& c, const std::string& kind, int tokens) {
  for (const KeyResult& k : c.keys)
    if (k.key.kind == kind && k.key.tokens == tokens) return &k;
  return nullptr;
}

class ReportCompare : public ::testing::Test {
 protected:
  void SetUp() override {
    base_path_ = dir_.file("baseline.db");
    cur_path_ = dir_.file("current.db");
    {
      TestDb b(base_path_);
      test::fill_baseline(b);
      TestDb c(cur_path_);
      test::fill_current(c);
    }
  }

  Comparison run(const std::string& a, const std::string& b, CompareOptions opt = {}) {
    auto sa = Store::open(a, OpenMode::read_only);
    auto sb = Store::open(b, OpenMode::read_only);
    EXPECT_TRUE(sa && sb);
    auto c = compare(*sa, *sb, opt);
    EXPECT_TRUE(c) << c.error().describe();
    return c ? *c : Comparison{};
  }

  ScratchDir dir_;
  std::string base_path_, cur_path_;
};

TEST_F(ReportCompare, EveryKeyHasItsExpectedVerdict) {
  Comparison c = run(base_path_, cur_path_);
  ASSERT_EQ(c.keys.size(), test::kExpected.size());
  for (const auto& e : test::kExpected) {
    const KeyResult* k = find(c, e.kind, e.tokens);
    ASSERT_NE(k, nullptr) << e.kind << " T=" << e.tokens;
    EXPECT_EQ(k->verdict, e.verdict) << e.kind << " T=" << e.tokens << ": got " << to_string(k->verdict) << " ("
                                     << k->reason << ")";
    EXPECT_EQ(k->key.problem, test::kMixtral);
    EXPECT_EQ(k->key.device, "NVIDIA H200 (sm_90a)");
    EXPECT_FALSE(k->reason.empty());
  }
  auto n = c.counts();
  EXPECT_EQ(n[Verdict::broken], 3);
  EXPECT_EQ(n[Verdict::regression], 2);
  EXPECT_EQ(n[Verdict::improvement], 1);
  EXPECT_EQ(n[Verdict::unchanged], 4);
  EXPECT_EQ(n[Verdict::missing], 1);
  EXPECT_EQ(n[Verdict::new_key], 1);
  EXPECT_TRUE(c.notices.empty()) << c.notices.front();
}

TEST_F(ReportCompare, RatiosAndWinners) {
  Comparison c = run(base_path_, cur_path_);
  const KeyResult* reg = find(c, "moe1", 16);
  ASSERT_TRUE(reg && reg->ratio);
  EXPECT_DOUBLE_EQ(*reg->ratio, 1.3);
  EXPECT_EQ(reg->baseline->kernel_name, test::kA);
  EXPECT_DOUBLE_EQ(*reg->current->timing.p10_us, 127);
  EXPECT_DOUBLE_EQ(*reg->current->speedup_vs_default, 1.2);
  EXPECT_NE(reg->reason.find("1.300x"), std::string::npos) << reg->reason;

  const KeyResult* imp = find(c, "moe1", 64);
  EXPECT_EQ(imp->baseline->kernel_name, test::kA);
  EXPECT_EQ(imp->current->kernel_name, test::kB);
  EXPECT_DOUBLE_EQ(*imp->ratio, 0.75);

  const KeyResult* noise = find(c, "moe1", 512);
  EXPECT_NE(noise->reason.find("overlap"), std::string::npos) << noise->reason;
  const KeyResult* small = find(c, "moe1", 4096);
  EXPECT_NE(small->reason.find("within the 5% threshold"), std::string::npos) << small->reason;

  const KeyResult* fresh = find(c, "moe1", 16384);
  EXPECT_FALSE(fresh->baseline);
  EXPECT_FALSE(fresh->ratio);
  const KeyResult* gone = find(c, "moe2", 16);
  EXPECT_FALSE(gone->current);
  EXPECT_TRUE(gone->failures.empty());
}

TEST_F(ReportCompare, BrokenKeysSayWhichKernelFailsAndWhy) {
  Comparison c = run(base_path_, cur_path_);
  const KeyResult* compile = find(c, "moe2", 1);
  ASSERT_EQ(compile->failures.size(), 1u);
  EXPECT_EQ(compile->failures[0].kernel_name, test::kE);
  EXPECT_EQ(compile->failures[0].status, "compile_error");
  EXPECT_NE(compile->reason.find("the baseline winner " + std::string(test::kE)), std::string::npos) << compile->reason;
  EXPECT_NE(compile->reason.find("too much shared data"), std::string::npos) << compile->reason;
  ASSERT_TRUE(compile->current);  // F replaced it; the key is still broken
  EXPECT_EQ(compile->current->kernel_name, test::kF);

  const KeyResult* verify = find(c, "moe2", 64);
  ASSERT_EQ(verify->failures.size(), 1u);
  EXPECT_EQ(verify->failures[0].status, "verify_failed");
  EXPECT_EQ(verify->failures[0].tokens, 37);  // verification runs at its own token count
  EXPECT_EQ(verify->failures[0].phase, "verify");
  EXPECT_FALSE(verify->current);

  const KeyResult* layer = find(c, "layer", 16);
  ASSERT_EQ(layer->failures.size(), 1u);
  EXPECT_EQ(layer->failures[0].kernel_name, test::kH);
  EXPECT_EQ(layer->failures[0].status, "timeout");
  EXPECT_NE(layer->reason.find("stage kernel"), std::string::npos) << layer->reason;
}

TEST_F(ReportCompare, FailuresAtOtherBucketsDoNotBreakAKey) {
  // H failed at T=16 only: a layer winner using H at T=64 is fine.
  TestDb extra(dir_.file("extra.db"));
  extra.layer_variant(test::kG, test::kH);
  extra.measure(test::kH, 16, std::nullopt, {}, {}, MeasurementStatus::launch_error, "short", "illegal address");
  extra.winner(std::string(test::kG) + "+" + test::kH, "layer", 64, 500, 490, 510);
  Comparison c = run(dir_.file("extra.db"), dir_.file("extra.db"));
  ASSERT_EQ(c.keys.size(), 1u);
  EXPECT_EQ(c.keys[0].verdict, Verdict::unchanged) << c.keys[0].reason;
}

TEST_F(ReportCompare, CompileErrorsInADryRunDatabaseBreakKeys) {
  // A compile-only current database: no GPU device, no winners, compile statuses only.
  {
    TestDb dry(dir_.file("dry.db"), {.name = "compile-only", .driver = "", .runtime = ""});
    dry.variant(test::kE, "moe2", "error: too many resources requested for launch");
    dry.variant(test::kA, "moe1");
  }
  Comparison c = run(base_path_, dir_.file("dry.db"));
  const KeyResult* broken = find(c, "moe2", 1);
  ASSERT_NE(broken, nullptr);
  EXPECT_EQ(broken->verdict, Verdict::broken) << broken->reason;
  EXPECT_EQ(c.counts()[Verdict::broken], 1);
  EXPECT_EQ(c.counts()[Verdict::missing], int(c.keys.size()) - 1);
}

TEST_F(ReportCompare, ADatabaseAgainstItselfChangesNothing) {
  for (const std::string& path : {base_path_, cur_path_}) {
    Comparison c = run(path, path);
    EXPECT_FALSE(c.keys.empty());
    for (const KeyResult& k : c.keys) {
      EXPECT_EQ(k.verdict, Verdict::unchanged) << k.key.kind << " T=" << k.key.tokens << ": " << k.reason;
      EXPECT_DOUBLE_EQ(k.ratio.value_or(0), 1.0);
    }
    EXPECT_FALSE(c.fails(std::vector<Verdict>{Verdict::regression, Verdict::broken}));
    EXPECT_EQ(c.counts()[Verdict::unchanged], int(c.keys.size()));
    EXPECT_TRUE(c.notices.empty());
  }
}

TEST_F(ReportCompare, FailOnSelectsVerdicts) {
  Comparison c = run(base_path_, cur_path_);
  const std::vector<Verdict> dflt{Verdict::regression, Verdict::broken};
  EXPECT_TRUE(c.fails(dflt));
  EXPECT_FALSE(c.fails(std::vector<Verdict>{}));
  EXPECT_TRUE(c.fails(std::vector<Verdict>{Verdict::missing}));
  EXPECT_TRUE(c.fails(std::vector<Verdict>{Verdict::new_key}));
  EXPECT_TRUE(c.fails(std::vector<Verdict>{Verdict::improvement}));
}

TEST_F(ReportCompare, InputsAreNotModified) {
  auto before_b = FileSnapshot::of(base_path_), before_c = FileSnapshot::of(cur_path_);
  (void)run(base_path_, cur_path_);
  EXPECT_TRUE(FileSnapshot::of(base_path_) == before_b);
  EXPECT_TRUE(FileSnapshot::of(cur_path_) == before_c);
}

TEST_F(ReportCompare, DriverUpgradeIsMatchedAndNoted) {
  TestDb newer(dir_.file("newer.db"), {.driver = "590.10", .runtime = "13.1"});
  test::fill_baseline(newer);
  Comparison c = run(base_path_, dir_.file("newer.db"));
  for (const KeyResult& k : c.keys) EXPECT_EQ(k.verdict, Verdict::unchanged) << k.reason;
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_NE(c.notices[0].find("device software differs"), std::string::npos) << c.notices[0];
  EXPECT_NE(c.notices[0].find("590.10"), std::string::npos) << c.notices[0];
  EXPECT_NE(c.notices[0].find("580.95.05"), std::string::npos) << c.notices[0];
}

TEST_F(ReportCompare, DifferentGpusAreComparedWithEachOtherAndNoted) {
  TestDb h100(dir_.file("h100.db"), {.name = "NVIDIA H100 80GB HBM3"});
  test::fill_baseline(h100);
  Comparison c = run(dir_.file("h100.db"), base_path_);
  ASSERT_FALSE(c.keys.empty());
  for (const KeyResult& k : c.keys) {
    EXPECT_EQ(k.verdict, Verdict::unchanged) << k.reason;
    EXPECT_EQ(k.key.device, "NVIDIA H100 80GB HBM3 (sm_90a) vs NVIDIA H200 (sm_90a)");
  }
  ASSERT_FALSE(c.notices.empty());
  EXPECT_NE(c.notices[0].find("different devices"), std::string::npos) << c.notices[0];
}

TEST_F(ReportCompare, DifferentToolchainsAreNoted) {
  TestDb other(dir_.file("nvrtc12.db"), {}, {.version = "12.8"});
  test::fill_baseline(other);
  Comparison c = run(base_path_, dir_.file("nvrtc12.db"));
  ASSERT_EQ(c.notices.size(), 1u);
  EXPECT_EQ(c.notices[0], "different toolchains: baseline nvrtc 13.0; current nvrtc 12.8");
  for (const KeyResult& k : c.keys) EXPECT_EQ(k.verdict, Verdict::unchanged) << k.reason;
}

TEST_F(ReportCompare, EmptyDatabasesAreNoted) {
  { TestDb empty(dir_.file("empty.db")); }
  Comparison c = run(dir_.file("empty.db"), base_path_);
  for (const KeyResult& k : c.keys) EXPECT_EQ(k.verdict, Verdict::new_key);
  ASSERT_FALSE(c.notices.empty());
  EXPECT_NE(c.notices[0].find("baseline database has no winners"), std::string::npos);
}

TEST_F(ReportCompare, FloorComesFromTheCallback) {
  CompareOptions opt;
  int calls = 0;
  opt.floor = [&](const ProblemRecord& p, const DeviceRecord& d, int tokens, std::string_view kind) -> std::optional<double> {
    ++calls;
    EXPECT_EQ(p.key, test::kMixtral);
    EXPECT_EQ(d.name, "NVIDIA H200");
    if (kind != "layer") return std::nullopt;
    return 10.0 * tokens;
  };
  Comparison c = run(base_path_, cur_path_, opt);
  EXPECT_EQ(calls, int(c.keys.size()));
  EXPECT_DOUBLE_EQ(find(c, "layer", 64)->floor_us.value_or(0), 640);
  EXPECT_FALSE(find(c, "moe1", 16)->floor_us);
}

TEST_F(ReportCompare, SortedByProblemDeviceKindTokens) {
  Comparison c = run(base_path_, cur_path_);
  for (std::size_t i = 1; i < c.keys.size(); ++i) {
    const Key& a = c.keys[i - 1].key;
    const Key& b = c.keys[i].key;
    EXPECT_LT(std::tie(a.problem, a.device, a.kind, a.tokens), std::tie(b.problem, b.device, b.kind, b.tokens));
  }
}

}  // namespace
}  // namespace ft::db::report
