#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "tests/unit/compile/test_kernels.hpp"
#include "compile/analyze/elf_image.hpp"
#include "compile/compile.hpp"

namespace ft {
namespace {

using test::amd_headers;
using test::amd_mfma_kernel;
using test::options_for;

std::vector<KernelSource> numbered_sources(int n) {
  std::vector<KernelSource> out;
  for (int i = 0; i < n; ++i) out.push_back(amd_mfma_kernel(fmt::format("ft_test_all_{}", i), 1 + i % 3));
  return out;
}

// Results come back in source order, each object holding its own kernel, and
// the work ran on more than one thread.
class CompileAll : public ::testing::TestWithParam<std::pair<Backend, const char*>> {};

TEST_P(CompileAll, RunsInParallelAndKeepsOrder) {
  auto [backend, target] = GetParam();
  FT_REQUIRE_BACKEND(backend, target);
  auto headers = amd_headers();
  auto opts = options_for(backend, headers);
  opts.jobs = 3;
  auto sources = numbered_sources(6);
  sources[2].text += "\nthis is not C++\n";  // one failure must not stop the others

  std::mutex m;
  std::set<std::thread::id> threads;
  std::vector<std::size_t> done_counts;
  std::set<std::string> names;
  auto results = compile_all(sources, *find_target(target), opts, [&](std::size_t done, std::size_t total, const std::string& name) {
    std::lock_guard lock(m);
    threads.insert(std::this_thread::get_id());
    done_counts.push_back(done);
    names.insert(name);
    EXPECT_EQ(total, 6u);
  });
  ASSERT_EQ(results.size(), 6u);
  for (std::size_t i = 0; i < results.size(); ++i) {
    if (i == 2) {
      ASSERT_FALSE(results[i]);
      EXPECT_EQ(results[i].error().code, Errc::compile);
      EXPECT_EQ(results[i].error().context, fmt::format("{}: ft_test_all_2", target));
      continue;
    }
    ASSERT_TRUE(results[i]) << results[i].error().describe();
    EXPECT_EQ(results[i]->kernel_name, sources[i].name);
    auto image = ElfImage::parse(results[i]->binary);
    ASSERT_TRUE(image);
    EXPECT_NE(image->symbol(sources[i].name), nullptr) << "result " << i << " holds another kernel";
  }
  EXPECT_EQ(done_counts, (std::vector<std::size_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(names.size(), 6u);
  EXPECT_GE(threads.size(), 2u) << "compile_all ran on one thread";
}

INSTANTIATE_TEST_SUITE_P(Backends, CompileAll,
                         ::testing::Values(std::pair{Backend::comgr, "gfx90a"}, std::pair{Backend::clang, "gfx942"},
                                           std::pair{Backend::clang, "gfx950"}),
                         [](const auto& info) { return fmt::format("{}_{}", to_string(info.param.first), info.param.second); });

// Ctrl-C: once `stop` is set no new source is handed out; the ones running
// finish, the rest are marked interrupted (not failed).
TEST(CompileAllStop, HandsOutNothingOnceStopped) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  auto headers = amd_headers();
  auto opts = options_for(Backend::clang, headers);
  opts.jobs = 1;
  std::atomic<bool> stop{false};
  opts.stop = &stop;
  auto sources = numbered_sources(4);
  auto results = compile_all(sources, *find_target("gfx942"), opts,
                             [&](std::size_t done, std::size_t, const std::string&) { stop = done >= 2; });
  ASSERT_EQ(results.size(), 4u);
  EXPECT_TRUE(results[0]) << results[0].error().describe();
  EXPECT_TRUE(results[1]) << results[1].error().describe();
  for (std::size_t i : {2u, 3u}) {
    ASSERT_FALSE(results[i]);
    EXPECT_EQ(results[i].error().code, Errc::interrupted) << results[i].error().describe();
  }
}

TEST(CompileAllEmpty, ReturnsNothing) {
  CompileOptions opts;
  opts.cache_dir = "none";
  EXPECT_TRUE(compile_all({}, *find_target("gfx942"), opts).empty());
}

}  // namespace
}  // namespace ft
