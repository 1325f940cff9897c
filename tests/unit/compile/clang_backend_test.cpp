// The clang backend's reading of a driver's -### plan (used to run a clang that lives in a
// Debian folder job by job through the folder's loader).
#include <gtest/gtest.h>

#include "compile/backends.hpp"

namespace ft::detail {
namespace {

TEST(ClangBackend, ParsesPlannedJobsAndKeepsWarnings) {
  std::string text =
      "Debian clang version 22.1.8 (1~deb13u5)\n"
      "Target: x86_64-pc-linux-gnu\n"
      "Thread model: posix\n"
      "InstalledDir: /r/usr/lib/x86_64-linux-gnu\n"
      "clang++: warning: argument unused during compilation: '-fno-such' [-Wunused-command-line-argument]\n"
      " \"/r/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2\" \"-cc1\" \"-triple\" \"amdgcn-amd-amdhsa\" "
      "\"-D\" \"QUOTE=\\\"a b\\\"\" \"-o\" \"/tmp/k-gfx950-0e125b.o\" \"-x\" \"hip\" \"k.hip\"\n"
      " \"/r/usr/lib/llvm-22/bin/lld\" \"-flavor\" \"gnu\" \"-o\" \"k.hsaco\" \"/tmp/k-gfx950-0e125b.o\"\n";
  std::string other;
  auto jobs = parse_planned_jobs(text, other);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0], (std::vector<std::string>{"/r/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", "-cc1", "-triple",
                                               "amdgcn-amd-amdhsa", "-D", "QUOTE=\"a b\"", "-o",
                                               "/tmp/k-gfx950-0e125b.o", "-x", "hip", "k.hip"}));
  EXPECT_EQ(jobs[1], (std::vector<std::string>{"/r/usr/lib/llvm-22/bin/lld", "-flavor", "gnu", "-o", "k.hsaco",
                                               "/tmp/k-gfx950-0e125b.o"}));
  EXPECT_EQ(other, "clang++: warning: argument unused during compilation: '-fno-such' [-Wunused-command-line-argument]\n");
}

TEST(ClangBackend, NoJobsInAnErrorOnlyPlan) {
  std::string other;
  EXPECT_TRUE(parse_planned_jobs("clang++: error: no such file or directory: 'x.hip'\n", other).empty());
  EXPECT_EQ(other, "clang++: error: no such file or directory: 'x.hip'\n");
}

}  // namespace
}  // namespace ft::detail
