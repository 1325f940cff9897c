#include "system/subprocess.hpp"

#include <gtest/gtest.h>

namespace ft {
namespace {

TEST(Subprocess, CapturesOutputAndExitCode) {
  auto r = run_capture({"/bin/sh", "-c", "echo out; echo err 1>&2; exit 3"});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_NE(r->output.find("out"), std::string::npos);
  EXPECT_NE(r->output.find("err"), std::string::npos);
}

TEST(Subprocess, FeedsStdin) {
  auto r = run_capture({"/bin/cat"}, "hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->output, "hello");
}

TEST(Subprocess, TimeoutKills) {
  auto r = run_capture({"/bin/sleep", "10"}, {}, std::chrono::milliseconds(100));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->timed_out);
}

TEST(Subprocess, FindExecutable) {
  EXPECT_TRUE(find_executable("sh"));
  EXPECT_FALSE(find_executable("no-such-program-xyz"));
}

}  // namespace
}  // namespace ft
