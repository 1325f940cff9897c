// flytune compile: writes a code object per variant plus the support unit and
// an index.json that describes them; refuses gfx950 without a toolchain and
// unknown targets or spaces with one line and exit 1.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/space.hpp"
#include "generator/space_sample.hpp"
#include "generator/target.hpp"
#include "tests/support/default_clang_only.hpp"
#include "tests/support/run_flytune.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace fs = std::filesystem;
using ft::test::run_flytune;

namespace {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "flytune-compile-cli-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

std::vector<std::byte> read_bytes(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string s = ss.str();
  std::vector<std::byte> out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

}  // namespace

TEST(CompileCli, SmallSpaceWritesObjectsAndIndex) {
  if (!ft::backend_for(*ft::find_target("gfx942"))) GTEST_FAIL() << "this test needs clang-19 for gfx942";
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  std::string out = tmp.path() + "/objects";
  // The cache lives in the temporary folder too: the test never touches $HOME.
  auto r = run_flytune({"compile", "--target", "gfx942", "--space", "small", "--out", out, "--cache-dir",
                        tmp.path() + "/cache"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("compiled, 0 failed"), std::string::npos) << r.output;

  std::ifstream f(fs::path(out) / "index.json");
  ASSERT_TRUE(f.good());
  nlohmann::json index = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(index.is_discarded()) << "index.json is not JSON";
  EXPECT_EQ(index["target"], "gfx942");
  EXPECT_EQ(index["backend"], "clang");

  // As many variants as the small space has legal ones, each with its object.
  const ft::Target& gfx942 = *ft::find_target("gfx942");
  auto space = ft::enumerate_space(gfx942, *ft::problem_from_preset("mixtral-8x7b"), ft::SpaceOptions::small());
  ASSERT_EQ(index["variants"].size(), space.legal.size());
  std::set<std::string> names;
  for (const auto& v : space.legal) names.insert(v.name());
  for (const auto& row : index["variants"]) {
    std::string name = row["name"];
    EXPECT_TRUE(names.count(name)) << name << " is not in the small space";
    EXPECT_EQ(row["status"], "ok") << name << ": " << row.value("why", "");
    EXPECT_EQ(row["file"], name + ".hsaco");
    auto bytes = read_bytes(fs::path(out) / std::string(row["file"]));
    ASSERT_GT(bytes.size(), 4u) << name;
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(bytes.data()) + 1, 3), "ELF") << name;
    EXPECT_EQ(row["hash"].get<std::string>().size(), 32u) << name;
    EXPECT_TRUE(row["params"].is_object());
    EXPECT_GT(row["threads"].get<int>(), 0);
    const auto& res = row["resources"];
    EXPECT_GT(res["vgprs"].get<int>(), 0) << name;
    EXPECT_GT(res["sgprs"].get<int>(), 0) << name;
    EXPECT_EQ(res["lds_bytes"], row["lds_bytes"]) << name;
    EXPECT_LE(res["lds_bytes"].get<int>(), gfx942.lds_bytes) << name;
    EXPECT_EQ(res["spills"], false) << name;
    EXPECT_GT(res["occupancy"].get<int>(), 0) << name;
    ASSERT_TRUE(res["matrix_ops"].is_object()) << name;
    EXPECT_FALSE(res["matrix_ops"].empty()) << name;
    EXPECT_TRUE(row["compile_seconds"].is_number());
    EXPECT_TRUE(row["from_cache"].is_boolean());
  }
  const auto& support = index["support"];
  EXPECT_EQ(support["status"], "ok");
  EXPECT_TRUE(fs::exists(fs::path(out) / std::string(support["file"]))) << support.dump();
  EXPECT_EQ(index["summary"]["compiled"], space.legal.size());
  EXPECT_EQ(index["summary"]["failed"], 0);

  // The table names every variant; a rerun is served from the cache.
  for (const auto& n : names) EXPECT_NE(r.output.find(n), std::string::npos) << n;
  auto again = run_flytune({"compile", "--target", "gfx942", "--space", "small", "--out", out, "--cache-dir",
                            tmp.path() + "/cache", "--json"});
  ASSERT_EQ(again.exit_code, 0) << again.output;
  auto j = nlohmann::json::parse(again.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << again.output;
  EXPECT_EQ(j["summary"]["cache_hits"], space.legal.size() + 1) << again.output;
}

// --covering-sample builds the sampler's pick of the space (generator/space_sample.hpp), no more, and says so.
TEST(CompileCli, CoveringSampleCompilesTheSampleOfTheSpace) {
  if (!ft::backend_for(*ft::find_target("gfx942"))) GTEST_FAIL() << "this test needs clang-19 for gfx942";
  TempDir tmp;
  ASSERT_FALSE(tmp.path().empty());
  const std::string space_text = "small;kind=moe2";
  auto space = ft::enumerate_space(*ft::find_target("gfx942"), *ft::problem_from_preset("mixtral-8x7b"),
                                   ft::SpaceOptions::parse(space_text).value());
  const auto sample = ft::covering_sample(space.legal);
  ASSERT_LT(sample.size(), space.legal.size()) << "a space whose sample leaves variants out";
  std::string out = tmp.path() + "/objects";
  auto r = run_flytune({"compile", "--target", "gfx942", "--space", space_text, "--covering-sample", "--out", out,
                        "--cache-dir", tmp.path() + "/cache"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(fmt::format("a covering sample of {} of the {} legal variants", sample.size(), space.legal.size())),
            std::string::npos)
      << r.output;

  std::ifstream f(fs::path(out) / "index.json");
  nlohmann::json index = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(index.is_discarded()) << "index.json is not JSON";
  EXPECT_EQ(index["covering_sample"], true);
  EXPECT_EQ(index["summary"]["sampled_from"], space.legal.size());
  EXPECT_EQ(index["summary"]["compiled"], sample.size());
  std::vector<std::string> want, got;
  for (const auto& v : sample) want.push_back(v.name());
  for (const auto& row : index["variants"]) {
    got.push_back(row["name"]);
    EXPECT_EQ(row["status"], "ok") << row.dump();
  }
  EXPECT_EQ(got, want);
}

TEST(CompileCli, Gfx950WithoutToolchainExitsOneWithTheReason) {
  ft::test::DefaultClangOnly only;  // as on a machine without LLVM >= 20
  if (!only.skip_reason().empty()) GTEST_SKIP() << only.skip_reason();
  TempDir tmp;
  auto r = run_flytune({"compile", "--target", "gfx950", "--out", tmp.path() + "/o", "--cache-dir", "none"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("flytune: error: gfx950: " + only.gfx950_reason()), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(tmp.path() + "/o")) << "nothing is written when nothing can be built";
}

TEST(CompileCli, UnknownTargetIsAUsageErrorNamingTheKnownOnes) {
  TempDir tmp;
  auto r = run_flytune({"compile", "--target", "gfx1", "--out", tmp.path() + "/o"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  for (const char* t : {"gfx90a", "gfx942", "gfx950", "sm_90a"}) EXPECT_NE(r.output.find(t), std::string::npos) << r.output;
}

TEST(CompileCli, GarbageSpaceIsAUsageError) {
  TempDir tmp;
  auto r = run_flytune({"compile", "--target", "gfx942", "--space", "tile_m=banana", "--out", tmp.path() + "/o"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(count_lines(r.output), 1) << r.output;
  EXPECT_NE(r.output.find("banana"), std::string::npos) << r.output;
}

TEST(CompileCli, MissingOutIsUsageError) {
  auto r = run_flytune({"compile", "--target", "gfx942"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}
