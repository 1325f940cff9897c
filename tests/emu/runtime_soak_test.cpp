// The runtime as a server links it, on the CPU emulator (runtime/check/soak.hpp):
// four host threads on four streams share one runtime over the recorded export
// (tests/data/tiny_forms.db: every launch form), launching at token counts
// drawn over several buckets, each selecting and freeing its plan, every few
// launches checked against the reference on poisoned output; device
// allocations, streams, modules and open files are the same after the warm-up
// and at the end, the host heap within a bound and RSS's trend over the last
// half within a bound. The mutants: the same measurement around a runtime
// that keeps a plan per launch reports the growth; a soak whose launches keep
// anonymous pages outside malloc (the test-only leak: what a driver's leak
// looks like, unseen by the heap) fails the RSS verdict. RssTrend: the slope's
// arithmetic on made-up series (a plateau passes, a steady leak does not).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/check/observed_device.hpp"
#include "runtime/check/soak.hpp"
#include "tests/support/forms_export.hpp"

namespace ft {
namespace {

constexpr std::size_t kHeapSlack = 96u << 10;  // host heap noise allowed after the warm-up (seen: -31 KB)
constexpr std::size_t kRssSlack = 8u << 20;  // RSS's trend over the last half (seen: see docs/EXPORT.md)

check::SoakOptions soak_options() {
  check::SoakOptions o;
  o.dir = test::forms_export().dir;
  o.emulate = true;
  o.launches = 96;
  o.tokens_min = 1;
  o.tokens_max = 33;  // over three of the recorded buckets (1, 16, 33) (the emulator runs ~1e8 multiply-adds a second)
  o.threads = 4;
  o.check_every = 8;
  o.warmup = 0.25;
  return o;
}

TEST(RuntimeSoak, ThreadsOnStreamsShareOneRuntimeAndNothingGrows) {
  ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
  const check::SoakOptions o = soak_options();
  auto r = check::soak_export(o);
  ASSERT_TRUE(r) << r.error().describe();
  std::printf("%s\n", r->json().c_str());
  EXPECT_EQ(r->errors, 0) << (r->failures.empty() ? "" : r->failures.front());
  EXPECT_EQ(r->check_failures, 0) << (r->failures.empty() ? "" : r->failures.front());
  EXPECT_EQ(r->launches, o.launches);
  EXPECT_GE(r->checks, long(o.threads) * (o.launches / o.threads / o.check_every));
  EXPECT_GE(r->buckets_seen.size(), 3u) << "the token counts drawn should reach several buckets";
  EXPECT_EQ(r->at_end.streams, o.threads);  // each thread's, destroyed after the sample
  EXPECT_EQ(r->series.size(), std::size_t(o.samples));
  EXPECT_EQ(r->series.front().launches, r->after_warmup.launches);
  EXPECT_EQ(r->at_end.launches, o.launches);
  std::printf("%s\n", check::rss_summary(r->series).c_str());
  for (const std::string& g : r->growth(kHeapSlack, kRssSlack)) ADD_FAILURE() << g;
}

// The test-only leak: every launch keeps 2 MiB of touched anonymous pages
// outside malloc. The heap sees nothing; the RSS verdict fails, naming the
// last half's growth; the launches and checks themselves still pass.
TEST(RuntimeSoak, ALeakOutsideTheHeapFailsTheRssVerdict) {
  ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
  check::SoakOptions o = soak_options();
  o.launches = 32;
  o.tokens_max = 16;  // the cheaper buckets (1, 16)
  o.samples = 8;
  o.test_leak_bytes_per_launch = 2u << 20;
  auto r = check::soak_export(o);
  ASSERT_TRUE(r) << r.error().describe();
  std::printf("%s\n", check::rss_summary(r->series).c_str());
  EXPECT_EQ(r->errors, 0);
  EXPECT_EQ(r->check_failures, 0);
  std::string all;
  for (const std::string& g : r->growth(kHeapSlack, kRssSlack)) all += g + "\n";
  std::printf("the leak's verdict:\n%s", all.c_str());
  EXPECT_NE(all.find("RSS keeps growing over the last half"), std::string::npos) << all;
  EXPECT_EQ(all.find("host heap"), std::string::npos) << "the leak is outside malloc:\n" << all;
  const check::RssTrend t = check::rss_trend(r->series);
  EXPECT_GT(t.bytes_per_launch, 0.75 * double(o.test_leak_bytes_per_launch));
  EXPECT_LT(t.bytes_per_launch, 1.5 * double(o.test_leak_bytes_per_launch));
}

check::SoakSample at(long launches, double rss_mb) {
  check::SoakSample s;
  s.launches = launches;
  s.rss_bytes = std::size_t(rss_mb * 1e6);
  return s;
}

// The trend's arithmetic: the samples at or after the middle of the series'
// launches, least squares, projected over that half.
TEST(RssTrend, APlateauPassesASteadyLeakDoesNot) {
  struct Case {
    const char* what;
    std::vector<check::SoakSample> series;
    double projected_mb;  // over the last half
    bool passes;          // within 8 MiB
  };
  const std::vector<Case> cases{
      {"flat", {at(0, 100), at(50, 100), at(100, 100)}, 0, true},
      {"warm-up growth that levels off", {at(0, 100), at(25, 140), at(50, 160), at(75, 160), at(100, 160)}, 0, true},
      {"steady 1 MB a launch", {at(0, 100), at(50, 150), at(100, 200)}, 50, false},
      {"growth only in the last half", {at(0, 100), at(50, 100), at(75, 110), at(100, 120)}, 20, false},
      {"one sample's noise", {at(0, 100), at(50, 100), at(60, 104), at(70, 100), at(80, 100), at(90, 100), at(100, 100)},
       -1.714, true},
      {"two samples", {at(10, 100), at(100, 103)}, 3, true},
  };
  for (const Case& c : cases) {
    const check::RssTrend t = check::rss_trend(c.series);
    EXPECT_NEAR(t.projected_bytes / 1e6, c.projected_mb, 0.01) << c.what;
    EXPECT_EQ(check::rss_growth(c.series, kRssSlack).empty(), c.passes) << c.what;
  }
  EXPECT_EQ(check::rss_trend({}).points, 0);
}

// The mutant: a runtime that kept what each launch selected (a plan and a
// device word per launch) grows by as much between two samples, and the same
// measurement reports it; once they are freed nothing has grown.
TEST(RuntimeSoak, WhatALeakingRuntimeKeepsIsReported) {
  ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
  auto seen = std::make_shared<check::Observed>();
  auto opened = check::open_on_emulator(test::forms_export().dir, [seen](std::unique_ptr<Device> d) -> std::unique_ptr<Device> {
    return std::make_unique<check::ObservedDevice>(std::move(d), seen);
  });
  ASSERT_TRUE(opened) << opened.error().describe();
  ft_runtime* rt = *opened;
  const std::string key = ft_runtime_problem_key(rt, 0);
  const check::SoakSample before = check::sample_now(*seen);
  const int launches = int(soak_options().launches);
  std::vector<ft_plan*> plans;
  std::vector<void*> words;
  for (int i = 0; i < launches; ++i) {
    ft_plan* plan = nullptr;
    ASSERT_EQ(ft_runtime_select(rt, key.c_str(), 1 + i % 33, &plan), FT_OK) << ft_runtime_last_error(rt);
    plans.push_back(plan);
    void* w = nullptr;
    ASSERT_EQ(ft_runtime_alloc(rt, 4, &w), FT_OK);
    words.push_back(w);
  }
  const auto leaked = check::growth(before, check::sample_now(*seen), kHeapSlack);
  std::string all;
  for (const std::string& g : leaked) all += g + "\n";
  std::printf("the mutant's growth:\n%s", all.c_str());
  EXPECT_NE(all.find("live device allocations: "), std::string::npos) << all;
  EXPECT_NE(all.find("host heap in use grew by"), std::string::npos) << all;
  for (ft_plan* p : plans) ft_plan_free(p);
  for (void* w : words) ft_runtime_free(rt, w);
  for (const std::string& g : check::growth(before, check::sample_now(*seen), kHeapSlack)) ADD_FAILURE() << g;
  ft_runtime_close(rt);
  EXPECT_EQ(seen->live_allocations(), 0u);
  EXPECT_EQ(seen->modules, 0);
}

}  // namespace
}  // namespace ft
