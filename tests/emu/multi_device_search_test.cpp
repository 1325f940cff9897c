// flytune search on two emulated devices of one target (issue 20): the real
// binary, two real workers (emu:sm_90a:0 and emu:sm_90a:1), the variants'
// verification and the token buckets dealt between them, every measurement
// naming the device it ran on, one device row, winners for every bucket.
// (A killed worker and a device that stays dead: tests/search, on fake workers.)
#include <map>
#include <set>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using nlohmann::json;

TEST(EmuMultiDevice, TwoEmulatedDevicesShareOneSearch) {
  test::ScratchDir dir;
  const std::string db = dir.file("two.db");
  // The cheap space and problem of search_test.cpp (tiny with H = 64, I = 128: the dealing
  // does not depend on the size), two buckets: one for each device.
  const test::ScopedEnv cache("FLYTUNE_CACHE_DIR", (std::string(FT_EMU_TEST_CACHE) + "/search").c_str());
  auto r = test::run_flytune({"search", "--devices", "emu:sm_90a:0,emu:sm_90a:1", "--space",
                              "small;atom=mma_m16n8k16_f32_bf16;split_k=1;tile_m=32;tile_n=32,64", "--hidden", "64",
                              "--inter", "128", "--tokens", "1,7", "--seed", "7", "--no-baseline", "--db", db, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto at = r.output.find("\n{");
  const json s = json::parse(r.output.substr(at == std::string::npos ? 0 : at + 1), nullptr, false);
  ASSERT_TRUE(s.is_object()) << r.output;
  EXPECT_EQ(s["device"], "2x flytune CPU emulator (sm_90a) (sm_90a)");
  ASSERT_EQ(s["gpus"].size(), 2u) << s.dump(2);
  std::set<int> buckets;
  for (const json& g : s["gpus"]) {
    EXPECT_EQ(g["buckets"].size(), 1u) << g.dump();  // two buckets, two devices: one each
    EXPECT_GT(g["verified"].get<int>(), 0) << g.dump();
    for (int t : g["buckets"]) buckets.insert(t);
  }
  EXPECT_EQ(buckets, std::set<int>({1, 7}));

  auto store = db::Store::open(db, db::OpenMode::read_only);
  ASSERT_TRUE(store) << store.error().describe();
  auto devices = store->devices();
  ASSERT_TRUE(devices);
  EXPECT_EQ(devices->size(), 1u);  // one model, one device row
  auto rows = store->measurements();
  ASSERT_TRUE(rows);
  std::map<std::string, int> per_device;
  std::map<int, std::set<std::string>> bucket_devices;  // timings of a bucket: one device only
  for (const db::MeasurementRecord& m : *rows) {
    EXPECT_EQ(m.status, db::MeasurementStatus::ok) << m.error_message;
    ++per_device[m.pci_bus_id];
    if (m.phase != "verify") bucket_devices[m.tokens].insert(m.pci_bus_id);
  }
  EXPECT_EQ(per_device.size(), 2u);
  EXPECT_TRUE(per_device.contains("emu:sm_90a:0") && per_device.contains("emu:sm_90a:1"));
  for (const auto& [tokens, devs] : bucket_devices) EXPECT_EQ(devs.size(), 1u) << "T=" << tokens << " timed on two devices";
  auto winners = store->winners();
  ASSERT_TRUE(winners);
  std::set<std::pair<int, std::string>> won;
  for (const db::WinnerRow& w : *winners) won.insert({w.winner.tokens, w.winner.kind});
  for (int t : {1, 7})
    for (const char* kind : {"moe1", "moe2", "layer"}) EXPECT_TRUE(won.contains({t, kind})) << t << " " << kind;
}

TEST(EmuMultiDevice, EmulatedDevicesOfTwoTargetsOrMixedWithGpusAreRefused) {
  auto mixed = test::run_flytune({"search", "--devices", "emu:sm_90a:0,cuda:0"});
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("mixes GPUs and emulated devices"), std::string::npos) << mixed.output;
  auto targets = test::run_flytune({"search", "--devices", "emu:sm_90a:0,emu:gfx942:1"});
  EXPECT_EQ(targets.exit_code, 2) << targets.output;
  EXPECT_NE(targets.output.find("share one target"), std::string::npos) << targets.output;
}

}  // namespace
}  // namespace ft
