// The one-launch family through the real binary on the emulator: flytune
// search --emulate with ol_blocks given finds its twins, verifies and times
// each alone, pairs them into the layer winner of every bucket; flytune
// export writes the layer as a clear and one launch (checked through the
// runtime before it writes), and check-export --emulate passes it at token
// counts and routings the search never ran. (Pairing beside the other
// families: tests/unit/search/layer_pairs_test.cpp.)
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using nlohmann::json;

// One one-launch variant per stage kind (8 blocks, 16 x 16 tiles, 1x2 warps of
// mma.sync m16n8k16 bf16); tile_m=8 leaves the tiled family none, so the
// twins are the layer.
constexpr const char* kSpace =
    "small;atom=mma_m16n8k16_f32_bf16;tile_m=8;ol_blocks=8;ol_tile_m=16;ol_tile_n=16;ol_tile_k=64;ol_warps=1x2";

TEST(EmuOneLaunchSearch, SearchPairsTheTwinsAndTheExportPassesCheckExport) {
  test::ScratchDir dir;
  const std::string db = dir.file("onelaunch.db");
  auto r = test::run_flytune({"search", "--emulate", "--target", "sm_90a", "--experts", "4", "--hidden", "128", "--inter", "256",
                              "--topk", "2", "--space", kSpace, "--tokens", "1,7", "--seed", "7", "--db", db, "--no-baseline"});
  ASSERT_EQ(r.exit_code, 0) << r.output;

  auto store = db::Store::open(db, db::OpenMode::read_only);
  ASSERT_TRUE(store) << store.error().describe();
  auto winners = store->winners();
  ASSERT_TRUE(winners) << winners.error().describe();
  std::set<std::pair<int, std::string>> seen;
  for (const db::WinnerRow& w : *winners) {
    seen.emplace(w.winner.tokens, w.winner.kind);
    EXPECT_NE(w.variant.kernel_name.find("_ol8"), std::string::npos) << w.variant.kernel_name;
    if (w.winner.kind != "layer") continue;
    const std::string s1 = w.variant.params.at("stage1_kernel"), s2 = w.variant.params.at("stage2_kernel");
    EXPECT_EQ(s1, "ft_sm_90a_moe1_bf16_m16n16k64_w1x2_mma16x8x16_s2_ol8");
    EXPECT_EQ(s2, "ft_sm_90a_moe2_bf16_m16n16k64_w1x2_mma16x8x16_s2_partials_y_ol8");
  }
  for (int t : {1, 7})
    for (const char* kind : {"moe1", "moe2", "layer"}) EXPECT_TRUE(seen.contains({t, kind})) << "T=" << t << " " << kind;
  int verified = 0;
  for (const db::MeasurementRecord& m : test::measurements(db))
    verified += m.phase == "verify" && m.status == db::MeasurementStatus::ok;
  EXPECT_EQ(verified, 2) << "each twin verified alone";

  const std::string out = dir.file("export");
  auto e = test::run_flytune({"export", "--db", db, "--out", out, "--check-routing", "uniform,masked"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::ifstream mf(out + "/manifest.json");
  const json manifest = json::parse(mf, nullptr, false);
  ASSERT_TRUE(manifest.is_object());
  for (const json& b : manifest["problems"][0]["buckets"]) {
    std::vector<std::string> steps;
    for (const json& s : b["steps"]) steps.push_back(s["step"]);
    EXPECT_EQ(steps, (std::vector<std::string>{"clear_y_acc", "stage2"})) << b.dump(2);
    EXPECT_EQ(b["steps"][1]["args"]["flags"], kFlagOneLaunchLayer) << b.dump(2);
  }

  auto c = test::run_flytune({"check-export", "--emulate", out, "--tokens", "2,9", "--routing", "uniform,one-empty,masked"});
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("6 of 6 checks passed"), std::string::npos) << c.output;
}

}  // namespace
}  // namespace ft
