// flytune search --emulate --strategy model: the model-guided search runs the
// whole protocol on the CPU emulator and ends with winners of every stage and
// layer; where the model has nothing or too little to learn from it times every
// candidate and the search's notes say why, bucket by bucket and kind by kind.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using nlohmann::json;

// Two cheap tiles of each stage on sm_90a, no default beside them, on the
// emulator's problem (tiny: E = 4, k = 2) with H = 64 and I = 128 instead of
// 256 and 512: what is checked here (the notes, the winners, the timings
// recorded) does not depend on the size, and each launch of the emulator costs
// a fifth (issue 50, docs/PERFORMANCE.md's CI budget).
constexpr const char* kSpace = "small;atom=mma_m16n8k16_f32_bf16;split_k=1;tile_m=32;tile_n=32,64";

json summary_of(const std::string& output) {
  const auto at = output.find("\n{") != std::string::npos ? output.find("\n{") + 1 : output.find('{');
  if (at == std::string::npos) return json();
  return json::parse(output.substr(at), nullptr, false);
}

TEST(EmuModelSearch, CompletesWithWinnersAndSaysWhyItTimedEverything) {
  test::ScratchDir dir;
  const test::ScopedEnv cache("FLYTUNE_CACHE_DIR", (std::string(FT_EMU_TEST_CACHE) + "/search").c_str());
  const std::string db = dir.file("model.db");
  auto r = test::run_flytune({"search", "--emulate", "--target", "sm_90a", "--space", kSpace, "--hidden", "64", "--inter", "128",
                              "--tokens", "1,7", "--seed", "7", "--strategy", "model", "--no-baseline", "--db", db, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json sum = summary_of(r.output);
  ASSERT_TRUE(sum.is_object()) << r.output;
  EXPECT_EQ(sum["interrupted"], false);
  std::set<std::pair<int, std::string>> winners;
  for (const json& w : sum["winners"]) {
    winners.emplace(w["tokens"].get<int>(), w["kind"].get<std::string>());
    EXPECT_GT(w["median_us"].get<double>(), 0);
  }
  for (int t : {1, 7})
    for (const char* kind : {"moe1", "moe2", "layer"}) EXPECT_TRUE(winners.contains({t, kind})) << "T=" << t << " " << kind;
  // The first bucket has no timings of this device to learn from, the second those of one bucket.
  std::vector<std::string> notes = sum["notes"].get<std::vector<std::string>>();
  for (const char* kind : {"moe1", "moe2"}) {
    const std::string first = std::string("T=1 ") + kind + ": timed all 2: no " + kind +
                              " timings on flytune CPU emulator (sm_90a) to learn from yet";
    const std::string second = std::string("T=7 ") + kind + ": timed all 2: the model's timings come from 1 bucket(s) (it needs 2)";
    EXPECT_NE(std::find(notes.begin(), notes.end(), first), notes.end()) << first << "\n" << sum["notes"].dump(1);
    EXPECT_NE(std::find(notes.begin(), notes.end(), second), notes.end()) << second << "\n" << sum["notes"].dump(1);
  }
  // The run is recorded as a model-guided one, and every candidate was timed at both buckets.
  auto store = db::Store::open(db, db::OpenMode::read_only);
  ASSERT_TRUE(store) << store.error().describe();
  auto runs = store->list_runs();
  ASSERT_TRUE(runs);
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().strategy, "model");
  db::MeasurementFilter f;
  f.status = db::MeasurementStatus::ok;
  std::set<std::pair<std::int64_t, int>> shorts;
  const auto rows = store->measurements(f).value();
  for (const db::MeasurementRecord& m : rows)
    if (m.phase == "short") shorts.emplace(m.variant_id, m.tokens);
  EXPECT_EQ(shorts.size(), 2u * 2u * 2u);  // two variants of each stage at each of the two buckets
}

}  // namespace
}  // namespace ft
