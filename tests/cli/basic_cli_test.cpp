// The CLI's contract: help lists the commands, bad input exits 2 with a usage
// line, --version names the commit.
#include <gtest/gtest.h>

#include "tests/support/run_flytune.hpp"

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
