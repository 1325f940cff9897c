// `flytune db`: every view in text and JSON over a sample database; missing,
// foreign, corrupt and newer files refused with one line, exit 1, untouched.
#include <filesystem>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using test::FileSnapshot;
using test::run_flytune;
using test::ScratchDir;

class DbCli : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("flytune.db");
    auto store = db::Store::open(path_);
    ASSERT_TRUE(store) << store.error().describe();
    ids_ = test::fill_sample(*store);
  }

  // Runs `flytune db --db <file> args...` and parses its JSON output.
  nlohmann::json json_of(std::vector<std::string> args) {
    args.insert(args.begin(), {"db", "--db", path_});
    args.push_back("--json");
    auto r = run_flytune(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    auto j = nlohmann::json::parse(r.output, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << r.output;
    return j;
  }

  ScratchDir dir_;
  std::string path_;
  test::SampleIds ids_;
};

TEST_F(DbCli, RunsTable) {
  auto r = run_flytune({"db", "--db", path_, "runs"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("finished"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("halving"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("flytune search --problem mixtral-8x7b"), std::string::npos) << r.output;
}

TEST_F(DbCli, RunsJsonCountsMeasurements) {
  auto j = json_of({"runs"});
  ASSERT_TRUE(j.is_array());
  ASSERT_EQ(j.size(), 1u);
  EXPECT_EQ(j[0]["id"], ids_.run);
  EXPECT_EQ(j[0]["status"], "finished");
  EXPECT_EQ(j[0]["measurements"]["ok"], 4);
  EXPECT_EQ(j[0]["measurements"]["compile_error"], 2);
  EXPECT_EQ(j[0]["options"]["tokens"], "1,16");
}

TEST_F(DbCli, WinnersTableGroupsByProblemAndDevice) {
  auto r = run_flytune({"db", "winners", "--db", path_});  // options after the view name work too
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("moe_e8_h4096_i14336_k2_bf16_swiglu_uniform on NVIDIA H200 (sm_90a"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ft_sm_90a_moe1_bf16_m64n128k32_w4_wgmma_s2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("116.0"), std::string::npos) << r.output;  // T=16 median
  EXPECT_NE(r.output.find("1.43x"), std::string::npos) << r.output;  // 166/116
}

TEST_F(DbCli, WinnersJsonAndFilters) {
  auto all = json_of({"winners"});
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]["tokens"], 1);
  EXPECT_EQ(all[1]["tokens"], 16);
  EXPECT_DOUBLE_EQ(all[1]["median_us"].get<double>(), 116.0);
  EXPECT_EQ(all[0]["device"]["name"], "NVIDIA H200");
  EXPECT_EQ(all[0]["toolchain"], "nvrtc 13.0");
  auto one = json_of({"winners", "--tokens", "16"});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0]["tokens"], 16);
  EXPECT_EQ(json_of({"winners", "--target", "gfx942"}).size(), 0u);
  EXPECT_EQ(json_of({"winners", "--problem", "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform"}).size(), 2u);
}

TEST_F(DbCli, Stats) {
  auto r = run_flytune({"db", "--db", path_, "stats"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("compile_error"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("verify_failed"), std::string::npos) << r.output;
  auto j = json_of({"stats"});
  EXPECT_EQ(j["measurements"]["ok"], 4);
  EXPECT_EQ(j["measurements"]["compile_error"], 2);
  ASSERT_EQ(j["variants"].size(), 2u);
  EXPECT_EQ(j["variants"][0]["compile_status"], "compile_error");
  EXPECT_EQ(j["variants"][0]["count"], 1);
  EXPECT_EQ(j["variants"][1]["count"], 2);
  EXPECT_EQ(j["runs"][0]["measurements"]["ok"], 4);
}

TEST_F(DbCli, Variants) {
  auto r = run_flytune({"db", "--db", path_, "variants"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ft_sm_90a_moe1_bf16_m128n256k64_w4_wgmma_s4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("49152"), std::string::npos) << r.output;
  auto broken = json_of({"variants", "--status", "compile_error"});
  ASSERT_EQ(broken.size(), 1u);
  EXPECT_EQ(broken[0]["id"], ids_.variant_broken);
  EXPECT_TRUE(broken[0]["code_object_hash"].is_null());
  EXPECT_EQ(json_of({"variants", "--limit", "1"}).size(), 1u);
  auto ok = json_of({"variants", "--status", "ok"});
  ASSERT_EQ(ok.size(), 2u);
  EXPECT_EQ(ok[0]["resources"]["regs"], 128);
  EXPECT_TRUE(ok[0]["resources"]["vgprs"].is_null());
  EXPECT_EQ(ok[0]["params"]["tile_m"], 64);
}

TEST_F(DbCli, BadVariantStatusIsUsageError) {
  auto r = run_flytune({"db", "--db", path_, "variants", "--status", "great"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST_F(DbCli, Schema) {
  auto r = run_flytune({"db", "--db", path_, "schema"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(fmt::format("schema version {} (this flytune supports {})", db::schema_version(),
                                      db::schema_version())),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("0001_create_tables"), std::string::npos) << r.output;
  auto j = json_of({"schema"});
  EXPECT_EQ(j["schema_version"], db::schema_version());
  EXPECT_EQ(j["application_id"], db::kApplicationId);
  EXPECT_EQ(j["journal_mode"], "wal");
  EXPECT_EQ(j["tables"]["measurements"], 6);
  auto sql = run_flytune({"db", "--db", path_, "schema", "--sql"});
  ASSERT_EQ(sql.exit_code, 0) << sql.output;
  EXPECT_EQ(sql.output, test::read_bytes(fmt::format("{}/schema_v{}.sql", FT_TEST_DATA_DIR, db::schema_version())));
}

TEST_F(DbCli, NeverWritesTheDatabase) {
  FileSnapshot before = FileSnapshot::of(path_);
  for (const char* view : {"runs", "winners", "stats", "variants", "schema"})
    EXPECT_EQ(run_flytune({"db", "--db", path_, view}).exit_code, 0) << view;
  EXPECT_TRUE(FileSnapshot::of(path_) == before);
}

TEST_F(DbCli, SnapshotCopiesEverything) {
  std::string copy = dir_.file("copy.db");
  auto r = run_flytune({"db", "--db", path_, "snapshot", copy});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto again = run_flytune({"db", "--db", path_, "snapshot", copy});
  EXPECT_EQ(again.exit_code, 1) << again.output;
  EXPECT_NE(again.output.find("already exists"), std::string::npos) << again.output;
  auto j = run_flytune({"db", "--db", copy, "winners", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.output;
  EXPECT_EQ(nlohmann::json::parse(j.output).size(), 2u);
}

TEST_F(DbCli, EmptyDatabaseSaysSo) {
  std::string fresh = dir_.file("fresh.db");
  ASSERT_TRUE(db::Store::open(fresh));
  auto r = run_flytune({"db", "--db", fresh, "winners"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no winners recorded"), std::string::npos) << r.output;
  EXPECT_EQ(run_flytune({"db", "--db", fresh, "runs", "--json"}).output, "[]\n");
}

TEST(DbCliRefusal, MissingDefaultDatabase) {
  ScratchDir dir;
  // Run in an empty folder so the default ./flytune.db does not exist.
  auto r = run_capture({"/bin/sh", "-c", std::string("cd '") + dir.file("") + "' && exec " FLYTUNE_BIN " db runs"}, {},
                       std::chrono::minutes(1));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->exit_code, 1) << r->output;
  EXPECT_EQ(r->output, "flytune: error: ./flytune.db: no such database; run 'flytune search' first\n");
  EXPECT_FALSE(std::filesystem::exists(dir.file("flytune.db")));
}

TEST(DbCliRefusal, NoViewIsUsageError) {
  auto r = run_flytune({"db"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(DbCliRefusal, GarbageForeignNewerAndCorruptFilesAreUntouched) {
  ScratchDir dir;
  std::string garbage = dir.file("garbage.db");
  test::write_bytes(garbage, std::string(5000, 'x'));
  std::string foreign = dir.file("foreign.db");
  test::raw_sql(foreign, "CREATE TABLE notes (body TEXT);");
  std::string newer = dir.file("newer.db");
  {
    ASSERT_TRUE(db::Store::open(newer));
  }
  test::raw_sql(newer, "PRAGMA user_version = 99;");
  std::string corrupt = dir.file("corrupt.db");
  {
    auto store = db::Store::open(corrupt);
    ASSERT_TRUE(store);
    test::fill_sample(*store);
  }
  {
    std::string bytes = test::read_bytes(corrupt);
    for (std::size_t i = 2 * 4096; i < 3 * 4096 && i < bytes.size(); ++i) bytes[i] = '\x11';
    test::write_bytes(corrupt, bytes);
  }
  struct Case {
    std::string path, message;
  };
  for (const Case& c : {Case{garbage, "not a flytune database (not an SQLite file); pass a new path or remove it"},
                        Case{foreign, "not a flytune database (an SQLite file of another application)"},
                        Case{newer, fmt::format("database schema is version 99, this flytune supports {}",
                                                db::schema_version())},
                        Case{corrupt, "database is corrupt"}}) {
    FileSnapshot before = FileSnapshot::of(c.path);
    auto r = run_flytune({"db", "--db", c.path, "runs"});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_EQ(r.output.rfind("flytune: error: " + c.path + ": ", 0), 0u) << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << "one line: " << r.output;
    EXPECT_TRUE(FileSnapshot::of(c.path) == before) << c.path;
  }
}

}  // namespace
}  // namespace ft

namespace ft {
namespace {

// A bucket with stage winners and no layer winner says why under its table:
// the message of the last layer measurement that failed there.
TEST(DbCliLayers, ABucketWithoutALayerWinnerSaysWhy) {
  test::ScratchDir dir;
  const std::string db = dir.file("h200.db");
  std::filesystem::copy_file(std::string(FT_TEST_DATA_DIR) + "/h200.db", db);
  test::raw_sql(db,
                "INSERT INTO measurements (run_id, variant_id, problem_id, device_id, tokens, phase, status, error_message, "
                "measured_at) SELECT run_id, variant_id, problem_id, device_id, tokens, 'verify', 'verify_failed', "
                "'rel L2 5.7e-01 (bound 8.0e-03)', chosen_at FROM winners WHERE kind = 'layer' AND tokens = 16384;"
                "DELETE FROM winners WHERE kind = 'layer' AND tokens IN (4096, 16384);");
  auto r = test::run_flytune({"db", "--db", db, "winners"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("T=16384: no layer winner: verify_failed (verify): rel L2 5.7e-01 (bound 8.0e-03)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("T=4096: no layer winner: no layer was measured"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("T=64: no layer winner"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft
