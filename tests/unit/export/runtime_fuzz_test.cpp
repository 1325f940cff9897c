// A seeded fuzz test of opening exports: thousands of export folders made by
// mutating a real one (tests/data/h200.db's export) -- JSON values replaced
// by other types, huge or negative numbers, members dropped, text bytes
// flipped or cut, files turned into folders, /dev/zero, empty files or
// nothing -- opened through ft::rt::Runtime with a fake device and through the
// C API. Every open must end in success or an error with a message; nothing
// may throw, crash or hang (the sanitizer build runs this too). A plan of a
// successful open is launched on the fake device (tests/unit/export/fake_device.hpp).
#include <chrono>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "flytune_runtime.h"
#include "runtime/src/runtime_impl.hpp"
#include "tests/support/json_mutator.hpp"
#include "tests/unit/export/export_test_support.hpp"
#include "tests/unit/export/fake_device.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::Mutator;

// Copies the export as hard links (cheap), then writes `manifest` and, for
// some iterations, replaces one code object with something else.
void lay_out(const std::string& from, const std::string& to, const std::string& manifest, Mutator& m,
             const std::vector<std::string>& objects) {
  std::error_code ec;
  fs::remove_all(to, ec);
  fs::create_directories(to);
  for (const std::string& o : objects) fs::create_hard_link(fs::path(from) / o, fs::path(to) / o, ec);
  test::write_bytes(to + "/manifest.json", manifest);
  if (m.pick(4) != 0 || objects.empty()) return;
  const fs::path victim = fs::path(to) / objects[m.pick(objects.size())];
  fs::remove(victim, ec);
  switch (m.pick(4)) {
    case 0: fs::create_directory(victim, ec); break;
    case 1: fs::create_symlink("/dev/zero", victim, ec); break;
    case 2: test::write_bytes(victim.string(), ""); break;
    default: break;  // missing
  }
}

TEST(RuntimeFuzz, GeneratedExportFoldersNeverCrashTheRuntime) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  std::vector<std::string> objects;
  for (const auto& e : fs::directory_iterator(ex.dir))
    if (e.path().extension() == ".cubin") objects.push_back(e.path().filename().string());
  test::ScratchDir scratch;
  const std::string dir = scratch.file("fuzz");
  const char* env = std::getenv("FLYTUNE_FUZZ_SECONDS");
  const double budget = env ? std::atof(env) : 10.0;
  const auto start = std::chrono::steady_clock::now();
  int runs = 0, opened = 0, launched = 0;
  for (std::uint64_t seed = 1; seed <= 20000; ++seed) {
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > budget) break;
    Mutator m(seed);
    json manifest = ex.manifest;
    const int edits = 1 + int(m.pick(3));
    for (int i = 0; i < edits; ++i) m.mutate(manifest);
    std::string text = manifest.dump();
    if (m.pick(5) == 0) text = m.bytes(text);
    lay_out(ex.dir, dir, text, m, objects);
    ++runs;
    auto r = rt::Runtime::open(dir, [] { return Result<std::unique_ptr<Device>>(std::make_unique<test::FakeDevice>("sm_90a")); });
    if (!r) {
      EXPECT_FALSE(r.error().message.empty()) << "seed " << seed;
    } else {
      ++opened;
      for (const rt::ProblemEntry& p : (*r)->manifest().problems)
        for (int t : {1, int(m.pick(40000)) + 1}) {
          auto plan = (*r)->select(p.key, t);
          if (!plan) continue;
          rt::LayerBuffers b{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
          launched += (*r)->launch(*plan, b, {}) ? 1 : 0;
        }
    }
    // The C API on the same folder: a status and a message, never an exception.
    char err[256] = {0};
    ft_runtime* handle = nullptr;
    const int st = ft_runtime_open(dir.c_str(), &handle, err, sizeof err);
    if (st != FT_OK) {
      EXPECT_NE(err[0], '\0') << "seed " << seed;
    }
    ft_runtime_close(handle);
  }
  std::printf("fuzz: %d folders, %d opened, %d layers launched\n", runs, opened, launched);
  EXPECT_GT(runs, 50);
  EXPECT_GT(opened, 0);  // some mutations leave a loadable export (a changed time_us, say)
}

}  // namespace
}  // namespace ft
