#include "generator/target.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "generator/atoms.hpp"

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

// LDS bounds a CU / SM: per-CU LDS over (the block's use + the system's reserve
// per block). On sm_90a the 1 KiB reserve decides between 2 and 1 blocks of 113
// and 114 KiB (2 x 115 KiB > 228 KiB); AMD reserves nothing.
struct LdsCase {
  const char* target;
  int lds_used, blocks;
};
class BlocksForLds : public ::testing::TestWithParam<LdsCase> {};

TEST_P(BlocksForLds, PerCuLdsOverUsePlusReserve) {
  const LdsCase& c = GetParam();
  EXPECT_EQ(find_target(c.target)->blocks_for_lds(c.lds_used), c.blocks) << c.target << " " << c.lds_used;
}

INSTANTIATE_TEST_SUITE_P(
    Table, BlocksForLds,
    ::testing::Values(LdsCase{"gfx90a", 0, 1 << 16},             // no LDS: no LDS bound
                      LdsCase{"gfx90a", 32768, 2}, LdsCase{"gfx90a", 32769, 1}, LdsCase{"gfx90a", 65536, 1},
                      LdsCase{"gfx942", 16384, 4}, LdsCase{"gfx942", 65536, 1},
                      LdsCase{"gfx950", 81920, 2}, LdsCase{"gfx950", 81921, 1}, LdsCase{"gfx950", 163840, 1},
                      LdsCase{"sm_90a", 0, 1 << 16},
                      LdsCase{"sm_90a", 113 * 1024, 2},           // 2 x (113 + 1) KiB = 228 KiB
                      LdsCase{"sm_90a", 114 * 1024, 1},           // 2 x (114 + 1) KiB > 228 KiB
                      LdsCase{"sm_90a", 232448, 1},               // the opt-in maximum, 227 KiB
                      LdsCase{"sm_90a", 48 * 1024, 4}));          // 4 x 49 KiB = 196 KiB, 5 x 49 > 228

TEST(Target, LdsColumnsAgree) {
  for (const Target& t : all_targets()) {
    SCOPED_TRACE(std::string(t.name));
    EXPECT_LE(t.lds_bytes + t.lds_reserve_per_block, t.lds_per_cu);  // the largest block fits
    EXPECT_EQ(t.blocks_for_lds(t.lds_bytes), 1);
    EXPECT_LE(t.lds_without_opt_in, t.lds_bytes);
  }
  // The driver's numbers on an NVIDIA H200 (targets.def cites them).
  const Target& h = *find_target("sm_90a");
  EXPECT_EQ(h.lds_per_cu, 228 * 1024);
  EXPECT_EQ(h.lds_bytes, 227 * 1024);
  EXPECT_EQ(h.lds_reserve_per_block, 1024);
  EXPECT_EQ(h.lds_without_opt_in, 48 * 1024);
  EXPECT_EQ(find_target("gfx942")->lds_reserve_per_block, 0);
}

TEST(Target, NvrtcArchAndMinimumCuda) {
  const Target& h = *find_target("sm_90a");
  EXPECT_EQ(h.sm, 90);
  EXPECT_TRUE(h.cuda_new_enough(12, 0));
  EXPECT_TRUE(h.cuda_new_enough(13, 0));
  EXPECT_FALSE(h.cuda_new_enough(11, 8));
  for (const Target& t : all_targets()) {
    if (t.is_amd()) { EXPECT_EQ(t.sm, 0) << t.name; }
  }
}

// How the wave size and the fp8 flavour reach the templates: every compile of a unit for a
// target defines FT_WAVE_SIZE and FT_FP8_<flavour> from its row (tuner/compile, tuner/emulate
// pass these).
TEST(Target, TemplateDefinesCarryTheWaveSizeAndFp8Flavour) {
  EXPECT_EQ(find_target("gfx90a")->template_defines(), (std::vector<std::string>{"FT_WAVE_SIZE=64"}));
  EXPECT_EQ(find_target("gfx942")->template_defines(), (std::vector<std::string>{"FT_WAVE_SIZE=64", "FT_FP8_FNUZ=1"}));
  EXPECT_EQ(find_target("gfx950")->template_defines(), (std::vector<std::string>{"FT_WAVE_SIZE=64", "FT_FP8_OCP=1"}));
  EXPECT_EQ(find_target("sm_90a")->template_defines(), (std::vector<std::string>{"FT_WAVE_SIZE=32", "FT_FP8_OCP=1"}));
}

// The mnemonic spelling follows the ISA column: CDNA2 has its own, CDNA3 and CDNA4 share one.
TEST(Target, IsaPicksTheMnemonicColumn) {
  const AtomInfo& a = *find_atom("mfma_f32_16x16x16_bf16");
  for (const Target& t : all_targets()) {
    if (!a.available_on(t.name)) continue;
    EXPECT_EQ(a.mnemonic_on(t), t.isa == Isa::cdna2 ? a.asm_cdna2 : a.asm_cdna3) << t.name;
  }
  EXPECT_EQ(a.mnemonic_on(*find_target("gfx90a")), "v_mfma_f32_16x16x16bf16_1k");
  EXPECT_EQ(a.mnemonic_on(*find_target("gfx942")), "v_mfma_f32_16x16x16_bf16");
  EXPECT_EQ(a.mnemonic_on(*find_target("gfx950")), "v_mfma_f32_16x16x16_bf16");
  EXPECT_EQ(find_atom("mma_m16n8k16_f32_bf16")->mnemonic_on(*find_target("sm_90a")), "HMMA.16816.F32.BF16");
}

// Help texts and messages join the table's names; nothing else spells the list.
TEST(Target, NameListsComeFromTheTable) {
  std::string joined;
  for (const Target& t : all_targets()) joined += (joined.empty() ? "" : ", ") + std::string(t.name);
  EXPECT_EQ(known_target_names(), joined);
  const std::string last(all_targets().back().name);
  EXPECT_EQ(known_target_names(" or "), joined.substr(0, joined.rfind(", ")) + " or " + last);
  EXPECT_EQ(lookup_target("gfx1100").error().message, "unknown target 'gfx1100'; known targets: " + joined);

  std::vector<std::string> defaults;
  for (const Target* t : dry_run_default_targets()) defaults.emplace_back(t->name);
  EXPECT_EQ(defaults, (std::vector<std::string>{"gfx942", "sm_90a"}));
  EXPECT_EQ(dry_run_default_names(), "gfx942 and sm_90a");
  for (const Target& t : all_targets())
    EXPECT_EQ(t.dry_run_default, std::find(defaults.begin(), defaults.end(), t.name) != defaults.end()) << t.name;
}

}  // namespace
}  // namespace ft
