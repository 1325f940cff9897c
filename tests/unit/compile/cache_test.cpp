#include "compile/cache.hpp"

#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "tests/unit/compile/test_kernels.hpp"
#include "compile/compile.hpp"
#include "system/hash.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
using test::amd_headers;
using test::amd_mfma_kernel;
using test::nvidia_headers;
using test::nvidia_mma_kernel;
using test::options_for;
using test::ScratchDir;

std::vector<fs::path> files_under(const std::string& dir) {
  std::vector<fs::path> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path());
  return out;
}

TEST(CompileCache, SecondCompileHitsAndAChangedHeaderMisses) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  ScratchDir dir;
  auto headers = amd_headers();
  auto opts = options_for(Backend::clang, headers, dir.path());
  const Target& t = *find_target("gfx942");
  auto src = amd_mfma_kernel("ft_test_cached");

  auto first = compile(src, t, opts);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_FALSE(first->from_cache);
  EXPECT_EQ(files_under(dir.path()).size(), 2u);  // <key>.bin + <key>.json, no temporaries left

  auto second = compile(src, t, opts);
  ASSERT_TRUE(second) << second.error().describe();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->binary, first->binary);
  EXPECT_EQ(second->hash, first->hash);
  EXPECT_EQ(second->cache_key, first->cache_key);
  EXPECT_EQ(second->kernel_name, "ft_test_cached");
  EXPECT_EQ(second->target, "gfx942");
  EXPECT_EQ(second->toolchain_version, first->toolchain_version);

  // A changed header misses.
  std::string changed_mfma = std::string(test::kAmdMfma) + "\n// changed\n";
  headers[1].text = changed_mfma;
  auto third = compile(src, t, opts);
  ASSERT_TRUE(third) << third.error().describe();
  EXPECT_FALSE(third->from_cache);
  EXPECT_NE(third->cache_key, first->cache_key);

  // So do a changed define, optimisation level and source text.
  auto key = [&](const CompileOptions& o, const KernelSource& s) { return *compile_cache_key(s, t, o); };
  auto base = key(opts, src);
  auto with_define = opts;
  with_define.defines = {"X=1"};
  EXPECT_NE(key(with_define, src), base);
  auto o2 = opts;
  o2.opt_level = 2;
  EXPECT_NE(key(o2, src), base);
  auto other_text = src;
  other_text.text += "\n";
  EXPECT_NE(key(opts, other_text), base);
  auto other_path = headers;
  other_path[0].path = "ft/port2.hpp";
  auto moved = opts;
  moved.headers = other_path;
  EXPECT_NE(key(moved, src), base);
  auto extra = headers;
  extra.push_back({"ft/unused.hpp", "#pragma once\n"});  // every header counts, included or not
  auto more = opts;
  more.headers = extra;
  EXPECT_NE(key(more, src), base);
  EXPECT_EQ(key(opts, src), base);  // and it is stable
}

TEST(CompileCache, NvrtcEntryKeepsLogAndPtx) {
  FT_REQUIRE_BACKEND(Backend::nvrtc, "sm_90a");
  ScratchDir dir;
  auto headers = nvidia_headers();
  auto opts = options_for(Backend::nvrtc, headers, dir.path());
  auto src = nvidia_mma_kernel("ft_test_nvrtc_cached");
  auto first = compile(src, *find_target("sm_90a"), opts);
  ASSERT_TRUE(first) << first.error().describe();
  auto second = compile(src, *find_target("sm_90a"), opts);
  ASSERT_TRUE(second) << second.error().describe();
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(second->log, first->log);  // the analyzer reads the ptxas report from it
  EXPECT_EQ(second->ptx, first->ptx);
  EXPECT_EQ(second->binary, first->binary);
}

CodeObject sample_object(const std::string& key) {
  CodeObject co;
  co.kernel_name = "k";
  co.target = "gfx942";
  co.backend = Backend::clang;
  co.toolchain_version = "clang 19.1.7";
  std::string bytes = "\x7f" "ELF not really";
  auto view = std::as_bytes(std::span(bytes));
  co.binary.assign(view.begin(), view.end());
  co.hash = xxh3_128_hex(co.binary);
  co.cache_key = key;
  co.log = "warning: \xff not utf-8";
  return co;
}

TEST(CompileCache, StoresAndLoadsAnEntry) {
  ScratchDir dir;
  CompileCache cache(dir.path());
  std::string key = xxh3_128_hex(std::string_view("some key"));
  EXPECT_FALSE(cache.load(key));
  ASSERT_TRUE(cache.store(sample_object(key)));
  auto hit = cache.load(key);
  ASSERT_TRUE(hit);
  EXPECT_TRUE(hit->from_cache);
  EXPECT_EQ(hit->binary, sample_object(key).binary);
  EXPECT_EQ(hit->backend, Backend::clang);
  EXPECT_EQ(hit->toolchain_version, "clang 19.1.7");
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / key.substr(0, 2) / (key + ".bin")));
}

TEST(CompileCache, DamagedEntryIsAMiss) {
  ScratchDir dir;
  CompileCache cache(dir.path());
  std::string key = xxh3_128_hex(std::string_view("damaged"));
  ASSERT_TRUE(cache.store(sample_object(key)));
  fs::path bin = fs::path(dir.path()) / key.substr(0, 2) / (key + ".bin");
  std::ofstream(bin, std::ios::binary | std::ios::app) << "x";  // binary no longer matches its hash
  EXPECT_FALSE(cache.load(key));

  ASSERT_TRUE(cache.store(sample_object(key)));
  ASSERT_TRUE(cache.load(key));
  std::ofstream(fs::path(dir.path()) / key.substr(0, 2) / (key + ".json"), std::ios::trunc) << "{not json";
  EXPECT_FALSE(cache.load(key));
}

TEST(CompileCache, UnwritableCacheDoesNotFailTheCompile) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  ScratchDir dir;
  std::string file = dir.path() + "/a-file";
  std::ofstream(file) << "x";
  auto headers = amd_headers();
  auto co = compile(amd_mfma_kernel("ft_test_nocache"), *find_target("gfx942"),
                    options_for(Backend::clang, headers, file + "/cache"));
  ASSERT_TRUE(co) << co.error().describe();
  EXPECT_NE(co->log.find("not cached"), std::string::npos) << co->log;
}

TEST(ContentHash, IsXxh3And128Bits) {
  // XXH3-128 of the empty input, canonical (big-endian) hex.
  EXPECT_EQ(xxh3_128_hex(std::string_view()), "99aa06d3014798d86001c324468d497f");
  ContentHasher a, b;
  a.add("ab").add("c");
  b.add("a").add("bc");
  EXPECT_NE(a.hex(), b.hex());  // fields are length-prefixed
}

}  // namespace
}  // namespace ft
