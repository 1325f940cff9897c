// `flytune export` as users run it: the recorded H200 database, refusals with
// one line and exit 1, the coverage report.
#include <filesystem>
#include <fstream>
#include <iterator>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "system/hash.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;

std::string h200_db() { return std::string(FT_TEST_DATA_DIR) + "/h200.db"; }

TEST(ExportCli, WritesManifestCodeObjectsAndHeader) {
  test::ScratchDir dir;
  const std::string out = dir.file("export");
  const std::string before = xxh3_128_hex(test::read_bytes(h200_db()));
  auto r = test::run_flytune({"export", "--db", h200_db(), "--out", out});
  if (r.exit_code != 0 && r.output.find("toolchain") != std::string::npos) GTEST_SKIP() << r.output;
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("exported 1 problem(s), 6 bucket(s)"), std::string::npos) << r.output;
  EXPECT_EQ(xxh3_128_hex(test::read_bytes(h200_db())), before) << "export modified the database";
  std::ifstream f(out + "/manifest.json");
  auto m = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(m.is_discarded());
  EXPECT_EQ(m["schema_version"], 4);
  // No GPU here: written, and the output says it was not checked.
  EXPECT_NE(r.output.find("not checked"), std::string::npos) << r.output;
  for (const auto& b : m["problems"][0]["buckets"])
    for (const auto& s : b["steps"])
      if (s["op"] == "launch") {
        const std::string name = s["code_object"];
        ASSERT_TRUE(fs::exists(out + "/" + name)) << name;
        EXPECT_EQ(xxh3_128_hex(test::read_bytes(out + "/" + name)) + ".cubin", name);
      }
  EXPECT_TRUE(fs::exists(out + "/flytune_dispatch.h"));
}

TEST(ExportCli, MissingAndCorruptDatabasesAreRefusedWithOneLine) {
  test::ScratchDir dir;
  auto missing = test::run_flytune({"export", "--db", dir.file("nope.db"), "--out", dir.file("o")});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.output, "flytune: error: " + dir.file("nope.db") + ": no such database; run 'flytune search' first\n");
  test::write_bytes(dir.file("bad.db"), std::string(4096, 'x'));
  auto bad = test::run_flytune({"export", "--db", dir.file("bad.db"), "--out", dir.file("o")});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("not a flytune database"), std::string::npos) << bad.output;
  EXPECT_EQ(std::count(bad.output.begin(), bad.output.end(), '\n'), 1) << bad.output;
  EXPECT_FALSE(fs::exists(dir.file("o")));
}

// A folder that holds files is never mixed into: refused without --force;
// with it the new export replaces the old whole.
TEST(ExportCli, RefusesAnOccupiedFolderUnlessForced) {
  test::ScratchDir dir;
  const std::string out = dir.file("export");
  fs::create_directories(out);
  test::write_bytes(out + "/old.cubin", "stale");
  auto refused = test::run_flytune({"export", "--db", h200_db(), "--out", out});
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("pass --force"), std::string::npos) << refused.output;
  EXPECT_TRUE(fs::exists(out + "/old.cubin"));
  auto forced = test::run_flytune({"export", "--db", h200_db(), "--out", out, "--force", "--no-check"});
  if (forced.exit_code != 0 && forced.output.find("toolchain") != std::string::npos) GTEST_SKIP() << forced.output;
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_NE(forced.output.find("not checked (--no-check)"), std::string::npos) << forced.output;
  EXPECT_FALSE(fs::exists(out + "/old.cubin"));
  EXPECT_TRUE(fs::exists(out + "/manifest.json"));
}

// check-export on the recorded small database's export: through the runtime
// on the CPU emulator; without a GPU and without --emulate, one clear line.
TEST(ExportCli, CheckExportRunsTheExportThroughTheRuntime) {
  test::ScratchDir dir;
  const std::string out = dir.file("tiny");
  const std::string forms = std::string(FT_TEST_DATA_DIR) + "/tiny_forms.db";
  auto e = test::run_flytune({"export", "--db", forms, "--out", out, "--check", "emulate", "--check-tokens", "16,33",
                              "--check-routing", "masked"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("checked through the runtime on CPU emulator (sm_90a)"), std::string::npos) << e.output;
  auto c = test::run_flytune({"check-export", out, "--emulate", "--tokens", "7", "--routing", "uniform,one-empty"});
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find(" passed on CPU emulator (sm_90a)"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("(sm_90a) (sm_90a)"), std::string::npos) << "the target said twice: " << c.output;
  EXPECT_NE(c.output.find("one-empty"), std::string::npos) << c.output;
  auto gpu = test::run_flytune({"check-export", out});
  if (gpu.exit_code == 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_EQ(gpu.exit_code, 1) << gpu.output;
  EXPECT_NE(gpu.output.find("--emulate"), std::string::npos) << gpu.output;
  auto bad = test::run_flytune({"check-export", out, "--emulate", "--routing", "sideways"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("unknown routing 'sideways'"), std::string::npos) << bad.output;
}

TEST(ExportCli, OutIsRequired) {
  auto r = test::run_flytune({"export", "--db", h200_db()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--out DIR is required"), std::string::npos) << r.output;
}

TEST(ExportCli, CoverageListsUntunedBucketsAndTheRule) {
  auto r = test::run_flytune({"export", "--check-coverage", "--tokens", "1..16384", "--db", h200_db()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("T=1      tuned"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("T=2      NOT TUNED: runtime uses bucket T=16 (next bucket up)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("T=8192   NOT TUNED: runtime uses bucket T=16384 (next bucket up)"), std::string::npos);
  EXPECT_NE(r.output.find("coverage: 6 of 15 requested (problem, T) have a tuned layer winner; 9 use the rule"),
            std::string::npos) << r.output;
  auto above = test::run_flytune({"export", "--check-coverage", "--tokens", "20000", "--db", h200_db()});
  EXPECT_NE(above.output.find("T=20000  NOT TUNED: runtime uses bucket T=16384 (largest bucket"), std::string::npos)
      << above.output;
}

}  // namespace
}  // namespace ft

namespace ft {
namespace {

// A database of two problems (the tiny forms search, its winners recorded
// a second time for the same shape under another routing): --problem exports
// one of them, by preset name or key; a problem the database lacks is one
// clear line and nothing written.
TEST(ExportCli, ProblemPicksOneOfSeveral) {
  test::ScratchDir dir;
  const std::string both = dir.file("both.db");
  fs::copy_file(std::string(FT_TEST_DATA_DIR) + "/tiny_forms.db", both);
  test::raw_sql(both,
                "INSERT INTO problems (key, experts, hidden, inter, topk, dtype, activation, routing) "
                "SELECT 'moe_e4_h256_i512_k2_bf16_swiglu_hot:2', experts, hidden, inter, topk, dtype, activation, 'hot:2' "
                "FROM problems WHERE routing = 'uniform';"
                "INSERT INTO winners SELECT (SELECT id FROM problems WHERE routing = 'hot:2'), device_id, tokens, kind, "
                "variant_id, run_id, median_us, p10_us, p90_us, default_variant_id, speedup_vs_default, chosen_at, pass "
                "FROM winners WHERE problem_id = (SELECT id FROM problems WHERE routing = 'uniform');");
  auto all = test::run_flytune({"export", "--db", both, "--out", dir.file("all"), "--no-check"});
  if (all.exit_code != 0 && all.output.find("toolchain") != std::string::npos) GTEST_SKIP() << all.output;
  ASSERT_EQ(all.exit_code, 0) << all.output;
  EXPECT_NE(all.output.find("exported 2 problem(s)"), std::string::npos) << all.output;
  auto one = test::run_flytune({"export", "--db", both, "--problem", "tiny", "--out", dir.file("one"), "--no-check"});
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_NE(one.output.find("exported 1 problem(s), 6 bucket(s)"), std::string::npos) << one.output;
  std::ifstream f(dir.file("one") + "/manifest.json");
  const auto m = nlohmann::json::parse(f, nullptr, false);
  ASSERT_FALSE(m.is_discarded());
  ASSERT_EQ(m["problems"].size(), 1u);
  EXPECT_EQ(m["problems"][0]["key"], "moe_e4_h256_i512_k2_bf16_swiglu_uniform");
  auto by_key = test::run_flytune({"export", "--db", both, "--problem", "moe_e4_h256_i512_k2_bf16_swiglu_hot:2", "--out",
                                   dir.file("key"), "--no-check"});
  ASSERT_EQ(by_key.exit_code, 0) << by_key.output;
  EXPECT_NE(by_key.output.find("exported 1 problem(s), 6 bucket(s)"), std::string::npos) << by_key.output;
  auto none = test::run_flytune({"export", "--db", both, "--problem", "qwen3-30b", "--out", dir.file("none"), "--no-check"});
  EXPECT_EQ(none.exit_code, 1) << none.output;
  EXPECT_NE(none.output.find("of problem moe_e128_h2048_i768_k8_bf16_swiglu_uniform"), std::string::npos) << none.output;
  EXPECT_FALSE(fs::exists(dir.file("none")));
}

}  // namespace
}  // namespace ft
