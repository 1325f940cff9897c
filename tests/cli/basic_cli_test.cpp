// The CLI's contract: help lists the commands, bad input exits 2 with a usage
// line, --version names the commit.
#include <gtest/gtest.h>

#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "compile/toolchain/toolchains.hpp"

using ft::test::run_flytune;

TEST(Cli, HelpListsCommands) {
  auto r = run_flytune({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("targets"), std::string::npos) << r.output;
}

TEST(Cli, UnknownCommandIsUsageError) {
  auto r = run_flytune({"frobnicate"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("flytune: error:"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
}

TEST(Cli, BadFlagIsUsageError) {
  auto r = run_flytune({"targets", "--no-such-flag"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(Cli, NoCommandIsUsageError) {
  auto r = run_flytune({});
  EXPECT_EQ(r.exit_code, 2) << r.output;
}

TEST(Cli, VersionNamesCommit) {
  auto r = run_flytune({"--version"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("flytune 0."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("commit"), std::string::npos) << r.output;
}

TEST(Cli, TargetsListsAllFour) {
  auto r = run_flytune({"targets"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* t : {"gfx90a", "gfx942", "gfx950", "sm_90a"}) EXPECT_NE(r.output.find(t), std::string::npos) << t;
}

TEST(Cli, TargetsJsonHasBackendOrReason) {
  auto r = run_flytune({"targets", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Every row either names backends or says why none can build it.
  EXPECT_NE(r.output.find("\"target\": \"gfx950\""), std::string::npos) << r.output;
}

// A FLYTUNE_CLANG that does not run is named, in `flytune targets` and in the error of a target
// only clang builds here; flytune does not quietly use another clang.
TEST(Cli, WrongFlytuneClangIsNamed) {
  ft::test::ScopedEnv clang("FLYTUNE_CLANG", "/no/such/clang++");
  auto r = run_flytune({"targets"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("clang  missing (FLYTUNE_CLANG=/no/such/clang++: not an executable file)"), std::string::npos)
      << r.output;
  if (ft::toolchains().comgr.lists("gfx950")) return;  // comgr from ROCm >= 6.4 builds it without clang
  auto c = run_flytune({"compile", "--target", "gfx950", "--space", "small", "--out", "/nonexistent/o", "--cache-dir", "none"});
  EXPECT_EQ(c.exit_code, 1) << c.output;
  EXPECT_NE(c.output.find("FLYTUNE_CLANG=/no/such/clang++"), std::string::npos) << c.output;
}
