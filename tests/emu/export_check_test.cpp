// The recorded small database (tests/data/tiny_forms.db: the tiny problem
// searched on the H200 with --space forcing every launch form into its layer
// winners -- a persistent stage, split-K, partials reduction, shuffled and
// tiled weights, the routed weight in stage 1) exported and run through the
// runtime on the CPU emulator: flytune check-export --emulate. Its mutant: the
// same export with the persistent stage's grid recorded by the old rule is
// refused, and its layers, run with that grid, fail.
#include <filesystem>
#include <fstream>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/check/check_export.hpp"
#include "tests/support/forms_export.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

using test::forms_export;

// The winners of the recorded database cover every launch form.
TEST(ExportCheck, RecordedWinnersCoverEveryLaunchForm) {
  const test::FormsExport& e = forms_export();
  ASSERT_TRUE(e.error.empty()) << e.error;
  std::set<std::string> forms;
  for (const json& b : e.manifest["problems"][0]["buckets"]) {
    for (const char* s : {"stage1", "stage2"}) {
      const json& v = b["stages"][s];
      if (v["tiles_per_block"].get<int>() > 1) forms.insert("persistent");
      if (v["layout"] == "tiled") forms.insert("tiled");
      if (v["layout"] == "shuffled") forms.insert("shuffled");
      if (v.value("split_k", 1) > 1 && std::string(s) == "stage2") forms.insert("split-K");
    }
    if (b["reduction"] == "partials") forms.insert("partials");
    if (b["reduction"] == "atomic") forms.insert("atomic");
  }
  for (const char* f : {"persistent", "tiled", "shuffled", "split-K", "partials", "atomic"})
    EXPECT_TRUE(forms.contains(f)) << "no layer winner with " << f;
}

TEST(ExportCheck, RecordedExportPassesThroughTheRuntimeOnTheEmulator) {
  const test::FormsExport& e = forms_export();
  ASSERT_TRUE(e.error.empty()) << e.error;
  check::CheckOptions o;
  o.dir = e.dir;
  o.emulate = true;
  // Each bucket, T between and above them; every routing (the emulator runs
  // about 1e8 multiply-adds a second, so the larger T get fewer routings).
  std::vector<int> buckets;
  for (const json& b : e.manifest["problems"][0]["buckets"]) buckets.push_back(b["tokens"]);
  o.tokens = check::check_tokens(buckets);
  std::erase_if(o.tokens, [](int t) { return t > 70; });
  auto report = check::check_export(o);
  ASSERT_TRUE(report) << report.error().describe();
  std::printf("%s", report->table().c_str());
  EXPECT_GE(report->rows.size(), 30u);
  EXPECT_EQ(report->failures(), 0) << report->table();
  o.tokens = {buckets.back(), check::check_tokens(buckets).back()};
  o.routings = {"masked", "hot"};
  auto large = check::check_export(o);
  ASSERT_TRUE(large) << large.error().describe();
  EXPECT_EQ(large->failures(), 0) << large->table();
}

// The mutant: the persistent stage's grid written the way exports once
// computed it (rows / tile_m, N / tile_n, split_k: one tile per block).
TEST(ExportCheck, PersistentGridOfTheOldRuleIsRefused) {
  const test::FormsExport& e = forms_export();
  ASSERT_TRUE(e.error.empty()) << e.error;
  test::ScratchDir scratch;
  const std::string dir = scratch.file("mutant");
  fs::copy(e.dir, dir);
  json m = e.manifest;
  bool mutated = false;
  for (json& b : m["problems"][0]["buckets"])
    for (json& st : b["steps"]) {
      if (st["op"] != "launch" || (st["role"] != "stage1" && st["role"] != "stage2")) continue;
      const json& v = b["stages"][st["role"].get<std::string>()];
      if (v["tiles_per_block"].get<int>() <= 1) continue;
      const int rows = st["args"]["max_padded_rows"], n = st["role"] == "stage1" ? m["problems"][0]["inter"].get<int>()
                                                                                    : m["problems"][0]["hidden"].get<int>();
      st["grid"] = {rows / v["tile_m"].get<int>(), n / v["tile_n"].get<int>(), st["role"] == "stage2" ? v.value("split_k", 1) : 1};
      mutated = true;
    }
  ASSERT_TRUE(mutated) << "no persistent stage among the winners";
  test::write_bytes(dir + "/manifest.json", m.dump(1));
  check::CheckOptions o;
  o.dir = dir;
  o.emulate = true;
  o.tokens = {16};
  auto report = check::check_export(o);
  ASSERT_FALSE(report);
  EXPECT_NE(report.error().message.find("differ from this runtime's layer program"), std::string::npos)
      << report.error().describe();
}

}  // namespace
}  // namespace ft
