// `flytune search` without a GPU: the dry run fills the database, a re-run adds
// a run but no duplicate variants, and a file that is not a flytune database is
// refused untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "store/store.hpp"
#include "tests/support/default_clang_only.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using test::FileSnapshot;
using test::run_flytune;
using test::ScratchDir;

std::vector<std::string> dry_run(const std::string& db) {
  return {"search", "--dry-run", "--space", "small", "--target", "gfx942", "--target", "sm_90a", "--db", db,
          "--tokens", "1,16"};
}

TEST(SearchCli, DryRunFillsTheDatabaseAndReRunsDoNotDuplicate) {
  ScratchDir dir;
  const std::string db = dir.file("flytune.db");
  setenv("FLYTUNE_CACHE_DIR", dir.file("cache").c_str(), 1);
  auto r = run_flytune(dry_run(db));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gfx942"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("sm_90a"), std::string::npos) << r.output;

  auto count_variants = [&] {
    auto store = db::Store::open(db, db::OpenMode::read_only);
    EXPECT_TRUE(store) << store.error().describe();
    auto v = store->variants();
    auto runs = store->list_runs();
    return std::pair{v ? v->size() : 0, runs ? runs->size() : 0};
  };
  auto [variants, runs] = count_variants();
  EXPECT_GE(variants, 8u);  // small space: both targets, both stages, all compiled
  EXPECT_EQ(runs, 1u);
  {
    auto store = db::Store::open(db, db::OpenMode::read_only);
    auto v = store->variants();
    for (const auto& rec : *v) {
      EXPECT_EQ(rec.compile_status, db::CompileStatus::ok) << rec.kernel_name << ": " << rec.compile_log;
      EXPECT_FALSE(rec.code_object_hash.empty()) << rec.kernel_name;
      EXPECT_TRUE(rec.resources.regs.has_value()) << rec.kernel_name;
    }
    auto all = store->list_runs();
    EXPECT_EQ((*all)[0].status, db::RunStatus::finished);
  }

  auto again = run_flytune(dry_run(db));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  auto [variants2, runs2] = count_variants();
  EXPECT_EQ(variants2, variants);
  EXPECT_EQ(runs2, 2u);
}

TEST(SearchCli, GarbageDatabaseIsRefusedUntouched) {
  ScratchDir dir;
  const std::string db = dir.file("garbage.db");
  std::ofstream(db) << "this is not a database, just some text that happens to be here\n";
  const FileSnapshot before = FileSnapshot::of(db);
  auto r = run_flytune({"search", "--dry-run", "--space", "small", "--target", "gfx942", "--db", db});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("flytune: error:"), std::string::npos) << r.output;
  EXPECT_EQ(FileSnapshot::of(db), before);
}

TEST(SearchCli, BadOptionValuesGetOneLineAndExitTwo) {
  ScratchDir dir;
  const std::string db = dir.file("x.db");
  for (std::vector<std::string> args : {
           std::vector<std::string>{"search", "--dry-run", "--target", "gfx1100", "--db", db},
           std::vector<std::string>{"search", "--dry-run", "--tokens", "0", "--db", db},
           std::vector<std::string>{"search", "--dry-run", "--problem", "nonesuch", "--db", db},
           std::vector<std::string>{"search", "--dry-run", "--space", "tile_m=banana", "--db", db},
       }) {
    auto r = run_flytune(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(std::filesystem::exists(db)) << "a refused search must not create the database";
  }
  auto r = run_flytune({"search", "--strategy", "psychic", "--dry-run", "--db", db});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(SearchCli, Gfx950DryRunSaysWhichToolchainIsMissing) {
  test::DefaultClangOnly only;  // as on a machine without LLVM >= 20
  if (!only.skip_reason().empty()) GTEST_SKIP() << only.skip_reason();
  ScratchDir dir;
  auto r = run_flytune({"search", "--dry-run", "--target", "gfx950", "--space", "small", "--db", dir.file("f.db")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gfx950: needs comgr from ROCm >= 6.4 or LLVM >= 20"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace ft
