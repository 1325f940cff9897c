#include "compile/toolchain/toolchains.hpp"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/support/scoped_env.hpp"

namespace ft {
namespace {

// The reason text for an AMD target nothing here can build names both what is
// needed and what was found.
TEST(Toolchains, Gfx950ReasonNamesWhatIsNeeded) {
  Toolchains tc;
  tc.comgr.found = true;
  tc.comgr.major = 2;
  tc.comgr.minor = 4;
  tc.comgr.isas = {"amdgcn-amd-amdhsa--gfx908", "amdgcn-amd-amdhsa--gfx90a:xnack-"};
  tc.clang.found = true;
  tc.clang.major = 19;
  tc.clang.amdgcn_cpus = {"gfx908", "gfx90a", "gfx940", "gfx942"};
  auto b = backend_for(*find_target("gfx950"), tc);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().describe(),
            "gfx950: needs comgr from ROCm >= 6.4 or LLVM >= 20; found comgr 2.4 (ISAs up to gfx90a) and clang 19 (up to gfx942)");
  EXPECT_EQ(*backend_for(*find_target("gfx90a"), tc), Backend::comgr);
  EXPECT_EQ(*backend_for(*find_target("gfx942"), tc), Backend::clang);
}

ClangInfo fake_clang(int major, std::vector<std::string> cpus) {
  ClangInfo c;
  c.found = true;
  c.major = major;
  c.version = fmt::format("{}.1.0", major);
  c.executable = fmt::format("/usr/lib/llvm-{}/bin/clang++", major);
  c.amdgcn_cpus = std::move(cpus);
  return c;
}

// gfx942 stays with the default clang; gfx950 goes to the newer one, which backend_for then finds.
TEST(Toolchains, NewerClangBuildsOnlyWhatTheDefaultOneLacks) {
  Toolchains tc;
  tc.clang = fake_clang(19, {"gfx90a", "gfx942"});
  tc.newer_clang = fake_clang(22, {"gfx90a", "gfx942", "gfx950"});
  EXPECT_EQ(tc.clang_for("gfx942"), &tc.clang);
  EXPECT_EQ(tc.clang_for("gfx950"), &tc.newer_clang);
  EXPECT_EQ(tc.clang_for("gfx1200"), nullptr);
  EXPECT_EQ(*backend_for(*find_target("gfx950"), tc), Backend::clang);
  EXPECT_EQ(backends_for(*find_target("gfx950"), tc), std::vector<Backend>{Backend::clang});
  tc.newer_clang.found = false;
  EXPECT_FALSE(backend_for(*find_target("gfx950"), tc));
}

// Where the newer clang was sought in vain, the gfx950 reason says where it looked.
TEST(Toolchains, Gfx950ReasonSaysWhereTheNewerClangWasSought) {
  Toolchains tc;
  tc.clang = fake_clang(19, {"gfx942"});
  tc.newer_clang.error = "no clang++-20..30 on PATH and no LLVM folder /c/trixie-llvm (scripts/setup-llvm.sh prepares it)";
  EXPECT_EQ(backend_for(*find_target("gfx950"), tc).error().message,
            "needs comgr from ROCm >= 6.4 or LLVM >= 20; found no comgr and clang 19 (up to gfx942); no clang++-20..30 "
            "on PATH and no LLVM folder /c/trixie-llvm (scripts/setup-llvm.sh prepares it)");
}

// A clang of this system runs as itself; one inside a Debian folder through the folder's loader,
// with its resource headers and linker named.
TEST(Toolchains, ClangInAFolderRunsThroughTheFoldersLoader) {
  ClangInfo system = fake_clang(19, {"gfx942"});
  EXPECT_EQ(system.command(system.executable), std::vector<std::string>{system.executable});
  EXPECT_TRUE(system.driver_flags().empty());

  ClangInfo folder = fake_clang(22, {"gfx950"});
  folder.root = "/c/trixie";
  folder.executable = "/c/trixie/usr/lib/llvm-22/bin/clang++";
  EXPECT_EQ(folder.command(folder.executable),
            (std::vector<std::string>{"/c/trixie/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "--library-path",
                                      "/c/trixie/usr/lib/x86_64-linux-gnu:/c/trixie/lib/x86_64-linux-gnu:/c/trixie/usr/lib/llvm-22/lib",
                                      "/c/trixie/usr/lib/llvm-22/bin/clang++"}));
  EXPECT_EQ(folder.driver_flags(), (std::vector<std::string>{"-B/c/trixie/usr/lib/llvm-22/bin",
                                                             "-resource-dir=/c/trixie/usr/lib/llvm-22/lib/clang/22"}));
  EXPECT_EQ(folder.tool("llvm-objdump"), "/c/trixie/usr/lib/llvm-22/bin/llvm-objdump");
}

using test::ScopedEnv;

// A wrong FLYTUNE_CLANG is an error naming the variable, not a quiet fall back to another clang.
TEST(Toolchains, WrongFlytuneClangIsNamedAndNothingElseIsSearched) {
  ScopedEnv clang("FLYTUNE_CLANG", "/no/such/clang++");
  Toolchains tc = probe_toolchains();
  EXPECT_FALSE(tc.clang.found);
  EXPECT_FALSE(tc.newer_clang.found);
  EXPECT_TRUE(tc.newer_clang.error.empty()) << tc.newer_clang.error;
  EXPECT_EQ(tc.clang.error, "FLYTUNE_CLANG=/no/such/clang++: not an executable file");
  auto b = backend_for(*find_target("gfx942"), tc);
  if (!tc.comgr.lists("gfx942")) {
    ASSERT_FALSE(b);
    EXPECT_NE(b.error().message.find("no clang (FLYTUNE_CLANG=/no/such/clang++: not an executable file)"),
              std::string::npos)
        << b.error().message;
  }
}

// The folder flytune looks in for the newer LLVM, and what it says about one that is not a system root.
TEST(Toolchains, LlvmFolderLocationAndAFolderThatIsNoRoot) {
  {
    ScopedEnv root("FLYTUNE_LLVM_ROOT", nullptr);
    ScopedEnv cache("FLYTUNE_CACHE_DIR", "/tmp/ftc");
    EXPECT_EQ(default_llvm_root(), "/tmp/ftc/trixie-llvm");
  }
  ScopedEnv root("FLYTUNE_LLVM_ROOT", "/x/llvm");
  EXPECT_EQ(default_llvm_root(), "/x/llvm");

  std::string dir = (std::filesystem::temp_directory_path() / "flytune-root-XXXXXX").string();
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  std::filesystem::create_directories(dir + "/usr/lib/llvm-22/bin");
  std::ofstream(dir + "/usr/lib/llvm-22/bin/clang++") << "#!/bin/sh\n";
  ClangInfo info = probe_clang_in_root(dir, 20);
  EXPECT_FALSE(info.found);
  EXPECT_NE(info.error.find("is not a system root"), std::string::npos) << info.error;
  std::filesystem::create_directories(dir + "/usr/lib/x86_64-linux-gnu");
  std::ofstream(dir + "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2") << "";
  info = probe_clang_in_root(dir, 23);
  EXPECT_NE(info.error.find("holds no usr/lib/llvm-<N>/bin/clang++ with N >= 23"), std::string::npos) << info.error;
  std::filesystem::remove_all(dir);
}

TEST(Toolchains, ComgrIsaMatchingIgnoresFeatures) {
  ComgrInfo c;
  c.isas = {"amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-"};
  EXPECT_TRUE(c.lists("gfx90a"));
  EXPECT_FALSE(c.lists("gfx90"));
}

TEST(Toolchains, NvrtcNeedsSm90) {
  Toolchains tc;
  auto b = backend_for(*find_target("sm_90a"), tc);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("NVRTC"), std::string::npos);
  tc.nvrtc.found = true;
  tc.nvrtc.major = 13;
  tc.nvrtc.archs = {75, 80, 90};
  EXPECT_EQ(*backend_for(*find_target("sm_90a"), tc), Backend::nvrtc);
}

// The arch NVRTC must list and the oldest toolkit come from the row (sm, min_cuda).
TEST(Toolchains, NvrtcArchAndVersionFromTheRow) {
  const Target& h = *find_target("sm_90a");
  Toolchains tc;
  tc.nvrtc.found = true;
  tc.nvrtc.major = 13;
  tc.nvrtc.archs = {75, 80, 89};
  auto b = backend_for(h, tc);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, fmt::format("needs NVRTC from CUDA >= {}; found NVRTC 13.0 without sm_{}", h.min_cuda, h.sm));
  tc.nvrtc.archs = {80, h.sm};
  tc.nvrtc.major = 11;
  tc.nvrtc.minor = 8;
  b = backend_for(h, tc);
  ASSERT_FALSE(b);
  EXPECT_EQ(b.error().message, fmt::format("needs NVRTC from CUDA >= {}; found NVRTC 11.8", h.min_cuda));
  tc.nvrtc.major = 12;
  tc.nvrtc.minor = 0;
  EXPECT_EQ(*backend_for(h, tc), Backend::nvrtc);
}

}  // namespace
}  // namespace ft
