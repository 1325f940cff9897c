#include "generator/target.hpp"

#include <gtest/gtest.h>

namespace ft {
namespace {

TEST(Target, AllFourKnown) {
  for (const char* name : {"gfx90a", "gfx942", "gfx950", "sm_90a"}) EXPECT_NE(find_target(name), nullptr) << name;
  EXPECT_EQ(all_targets().size(), 4u);
}

TEST(Target, UnknownListsKnown) {
  auto t = lookup_target("gfx1100");
  ASSERT_FALSE(t);
  EXPECT_NE(t.error().message.find("gfx942"), std::string::npos);
}

TEST(Target, FactsFromReference) {
  EXPECT_EQ(find_target("gfx942")->lds_bytes, 64 * 1024);
  EXPECT_EQ(find_target("gfx950")->lds_bytes, 160 * 1024);
  EXPECT_EQ(find_target("sm_90a")->wave_size, 32);
  EXPECT_EQ(find_target("gfx942")->fp8, Fp8Flavour::fnuz);
  EXPECT_EQ(find_target("gfx950")->fp8, Fp8Flavour::ocp);
  EXPECT_EQ(find_target("sm_90a")->family_list(), (std::vector<std::string>{"mma.sync", "wgmma"}));
  EXPECT_EQ(find_target("gfx942")->comgr_isa(), "amdgcn-amd-amdhsa--gfx942");
}

TEST(Target, Occupancy) {
  const Target& t = *find_target("gfx942");
  EXPECT_EQ(t.occupancy_for_registers(64), 8);
  EXPECT_EQ(t.occupancy_for_registers(128), 4);
  EXPECT_EQ(t.occupancy_for_registers(129), 3);  // rounds up to 136
  EXPECT_EQ(t.occupancy_for_registers(512), 1);
  EXPECT_EQ(t.occupancy_for_registers(513), 0);
  const Target& h = *find_target("sm_90a");
  EXPECT_EQ(h.occupancy_for_registers(255), 2);
  EXPECT_EQ(h.occupancy_for_registers(32), 16);
}

}  // namespace
}  // namespace ft
