#include "tuner/toolchain/toolchains.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace ft
