// The runtime library on a real GPU: export tests/data/h200.db, then check it
// the way `flytune check-export` does -- whole layers at T = 1, 5, 64, 700,
// 4096 (tuned buckets and T between them) under every routing, -1 slots
// included, against the support unit's reference kernels; once more through a
// captured graph (the launch path must not synchronise). Without a GPU of the
// export's target: "skipped: no GPU (...)".
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "export/export.hpp"
#include "runtime/check/check_export.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

// The recorded database: $FT_TEST_DATA_DIR, the source tree this was built
// from, or (a build folder carried to another machine inside the tree,
// build/<name>/tests/gpu) four levels up from the working directory.
std::string h200_db() {
  namespace fs = std::filesystem;
  for (std::string dir : {std::string(std::getenv("FT_TEST_DATA_DIR") ? std::getenv("FT_TEST_DATA_DIR") : ""),
                          std::string(FT_TEST_DATA_DIR), std::string("../../../tests/data"), std::string("../../../../tests/data")})
    if (!dir.empty() && fs::exists(fs::path(dir) / "h200.db")) return (fs::path(dir) / "h200.db").string();
  return std::string(FT_TEST_DATA_DIR) + "/h200.db";
}

struct Exported {
  test::ScratchDir scratch;
  std::string dir;
  std::string skip;   // no compiler here
  std::string error;
};

const Exported& h200_export() {
  static Exported e;
  static bool done = false;
  if (done) return e;
  done = true;
  e.dir = e.scratch.file("export");
  db::ExportOptions o{h200_db(), e.dir, {}, {}};
  auto s = db::export_winners(o);
  if (!s) (s.error().code == Errc::toolchain ? e.skip : e.error) = "export: " + s.error().describe();
  return e;
}

void check(bool graph, std::vector<int> tokens) {
  const Exported& e = h200_export();
  if (!e.skip.empty()) GTEST_SKIP() << e.skip;
  ASSERT_TRUE(e.error.empty()) << e.error;
  check::CheckOptions o;
  o.dir = e.dir;
  o.tokens = std::move(tokens);
  o.graph = graph;
  auto report = check::check_export(o);
  if (!report && report.error().code == Errc::no_device) GTEST_SKIP() << "skipped: no GPU (" << report.error().describe() << ")";
  ASSERT_TRUE(report) << report.error().describe();
  std::printf("%s", report->table().c_str());
  ASSERT_FALSE(report->rows.empty());
  EXPECT_EQ(report->failures(), 0) << report->table();
}

TEST(RuntimeGpu, LayerMatchesReferenceAcrossBucketsAndRoutings) { check(false, {1, 5, 64, 700, 4096}); }

TEST(RuntimeGpu, LaunchCapturesIntoAGraph) { check(true, {5, 700}); }

}  // namespace
}  // namespace ft
