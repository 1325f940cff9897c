// The runtime library on a real GPU: export tests/data/h200.db, load it, run
// whole layers at T = 1, 5, 64, 700, 4096 (tuned buckets and T between them)
// and compare Y with the support unit's reference kernels; once more through a
// captured graph (the launch path must not synchronise). Without a GPU of the
// export's target: "skipped: no GPU (...)".
#include <cstdlib>
#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "db/export/export.hpp"
#include "runtime/examples/layer_check.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "tests/unit/db/db_test_support.hpp"

namespace ft {
namespace {

struct OpenedExport {
  test::ScratchDir scratch;
  ft_runtime* rt = nullptr;
  std::string key;
  std::string skip;   // no GPU / no compiler here
  std::string error;
  ~OpenedExport() { ft_runtime_close(rt); }
};

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

OpenedExport& h200_export() {
  static OpenedExport e;
  static bool done = false;
  if (done) return e;
  done = true;
  const std::string dir = e.scratch.file("export");
  auto s = db::export_winners({h200_db(), dir, {}, {}});
  if (!s) {
    (s.error().code == Errc::toolchain ? e.skip : e.error) = "export: " + s.error().describe();
    return e;
  }
  char err[1024] = {0};
  const int st = ft_runtime_open(dir.c_str(), &e.rt, err, sizeof err);
  if (st == FT_ERR_DEVICE || st == FT_ERR_TARGET) e.skip = std::string("skipped: no GPU (") + err + ")";
  else if (st != FT_OK) e.error = err;
  else e.key = ft_runtime_problem_key(e.rt, 0);
  return e;
}

#define FT_NEED_EXPORT(e)                        \
  OpenedExport& e = h200_export();               \
  if (!e.skip.empty()) GTEST_SKIP() << e.skip;   \
  ASSERT_TRUE(e.error.empty()) << e.error

TEST(RuntimeGpu, LayerMatchesReferenceAcrossBuckets) {
  FT_NEED_EXPORT(e);
  for (int t : {1, 5, 64, 700, 4096}) {
    const example::LayerCheck c = example::check_layer(e.rt, e.key, t, 0x5eed + std::uint64_t(t));
    std::printf("T=%-5d bucket %-5d %s\n", t, c.bucket, c.summary.c_str());
    EXPECT_TRUE(c.passed) << "T=" << t << " (bucket " << c.bucket << "): " << c.summary;
  }
}

TEST(RuntimeGpu, LaunchCapturesIntoAGraph) {
  FT_NEED_EXPORT(e);
  // The runtime's own device: capture ft_plan_launch on a stream, then replay.
  Device& dev = rt::runtime_of(e.rt)->device();
  auto stream = dev.create_stream();
  ASSERT_TRUE(stream) << stream.error().describe();
  for (int t : {5, 700}) {
    const example::LayerCheck c = example::check_layer(e.rt, e.key, t, 77 + std::uint64_t(t),
        [&](ft_plan* plan, const ft_layer_buffers& b) -> int {
          if (!dev.begin_capture(*stream)) return FT_ERR_DEVICE;
          const int st = ft_plan_launch(plan, &b, stream->p);
          auto graph = dev.end_capture(*stream);
          if (st != FT_OK || !graph) return st != FT_OK ? st : FT_ERR_DEVICE;
          const bool ok = dev.launch_graph(*graph, *stream) && dev.synchronize(*stream);
          (void)dev.destroy_graph(*graph);
          return ok ? FT_OK : FT_ERR_DEVICE;
        });
    EXPECT_TRUE(c.passed) << "graph T=" << t << ": " << c.summary;
  }
  (void)dev.destroy_stream(*stream);
}

}  // namespace
}  // namespace ft
