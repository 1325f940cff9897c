// The gfx942 default space built twice: by the default clang (19, Debian 12) and by the newer
// clang that builds gfx950 (22, Debian 13's, from scripts/setup-llvm.sh). A newer compiler may
// allocate registers differently, but the kernels are the same: every variant compiles with
// both, with the same LDS, the same MFMA instruction and count, no spills with either, the same
// occupancy, and unified register (VGPR + AGPR) and SGPR counts within the tolerance below.
// The VGPR / AGPR split is not compared: clang 22 keeps the MFMA accumulators in VGPRs (AGPR 0
// for every default gfx942 variant) where clang 19 put them in AGPRs; on gfx90a+ both come
// from one register file, so occupancy follows the sum. The per-variant table is recorded
// (--gtest_output=json) and a summary printed. CI builds the space's covering sample
// (generator/space_sample.hpp); the FullSpace test (ctest label fullspace) every variant.
#include <algorithm>
#include <cstdlib>
#include <map>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "generator/space_sample.hpp"
#include "tests/compile/compile_test_support.hpp"
#include "search/compile_space.hpp"

namespace ft {
namespace {

// Registers may move by this fraction of the larger count, plus a small constant: register
// allocation changes between LLVM releases, the kernels' data do not (measured 19.1.7 -> 22.1.8:
// VGPR+AGPR -59..+26, at most 23% of the larger count; SGPR -5..-1).
constexpr double kRegisterTolerance = 0.25;
constexpr int kRegisterSlack = 8;

bool registers_close(int a, int b) {
  return std::abs(a - b) <= kRegisterSlack + int(kRegisterTolerance * std::max(a, b));
}

struct Spread {
  int lowest = 0, highest = 0, changed = 0;
  void add(int delta) {
    lowest = std::min(lowest, delta);
    highest = std::max(highest, delta);
    changed += delta != 0;
  }
  std::string text() const { return fmt::format("{:+d}..{:+d} ({} changed)", lowest, highest, changed); }
};

void check_clang_versions(bool whole) {
  const Toolchains& tc = toolchains();
  const Target& target = *find_target("gfx942");
  if (!tc.clang.found || !tc.newer_clang.found || !tc.newer_clang.supports(target.name)) {
    std::string why = fmt::format("needs the default clang and a newer one: default {}; newer {}", tc.clang.describe(),
                                  tc.newer_clang.describe());
    if (test::toolchain_expected(*find_target("gfx950"))) FAIL() << why;
    GTEST_SKIP() << why;
  }
  Toolchains newer = tc;
  newer.clang = tc.newer_clang;
  newer.newer_clang = {};
  CompileSpaceOptions old_options, new_options;
  old_options.progress = new_options.progress = false;
  // Clang 19's build of the space is DefaultSpace's gfx942_clang one (same variants, toolchain and options):
  // its cache folder, so whichever of the two tests runs second compiles nothing with clang 19.
  old_options.compile = test::compile_options_for(test::default_space_cache({"gfx942", Backend::clang}), Backend::clang);
  new_options.compile = test::compile_options_for("ClangVersions.gfx942.new", Backend::clang);
  new_options.compile.toolchains = &newer;
  if (!whole) old_options.select = new_options.select = covering_sample;

  auto old_space = compile_space(target, test::mixtral(), old_options);
  auto new_space = compile_space(target, test::mixtral(), new_options);
  ASSERT_TRUE(old_space) << old_space.error().describe();
  ASSERT_TRUE(new_space) << new_space.error().describe();
  ASSERT_EQ(old_space->variants.size(), new_space->variants.size());

  Spread unified, vgpr, agpr, sgpr;
  for (std::size_t i = 0; i < old_space->variants.size(); ++i) {
    const CompiledVariant& a = old_space->variants[i];
    const CompiledVariant& b = new_space->variants[i];
    std::string name = a.variant.name();
    ASSERT_EQ(name, b.variant.name());
    ASSERT_TRUE(a.resources && b.resources) << name << ": " << a.analysis_error << b.analysis_error;
    EXPECT_NE(a.object->toolchain_version, b.object->toolchain_version) << name << ": both built by one clang";
    const Resources& x = *a.resources;
    const Resources& y = *b.resources;
    EXPECT_EQ(x.lds_bytes, y.lds_bytes) << name;
    EXPECT_EQ(x.matrix_ops, y.matrix_ops) << name;
    EXPECT_FALSE(x.spills || y.spills) << name << ": " << x.notes << " / " << y.notes;
    EXPECT_EQ(x.occupancy, y.occupancy) << name << ": " << x.notes << " / " << y.notes;
    EXPECT_TRUE(registers_close(x.regs, y.regs)) << name << " VGPR+AGPR " << x.regs << " -> " << y.regs;
    EXPECT_TRUE(registers_close(x.sgprs, y.sgprs)) << name << " SGPR " << x.sgprs << " -> " << y.sgprs;
    unified.add(y.regs - x.regs);
    vgpr.add(y.vgprs - x.vgprs);
    agpr.add(y.agprs - x.agprs);
    sgpr.add(y.sgprs - x.sgprs);
    ::testing::Test::RecordProperty(name, fmt::format("vgpr {}->{} agpr {}->{} sgpr {}->{} occupancy {}->{} instructions {}->{}", x.vgprs,
                                     y.vgprs, x.agprs, y.agprs, x.sgprs, y.sgprs, x.occupancy, y.occupancy,
                                     x.instructions, y.instructions));
  }
  std::string summary = fmt::format(
      "{} variants, {} -> {}: VGPR+AGPR {}, VGPR {}, AGPR {}, SGPR {}; LDS, MFMA counts and occupancy equal",
      old_space->variants.size(), old_space->variants.front().object->toolchain_version,
      new_space->variants.front().object->toolchain_version, unified.text(), vgpr.text(), agpr.text(), sgpr.text());
  ::testing::Test::RecordProperty("summary", summary);
  fmt::print("{}\n", summary);
}

// CI: the covering sample of the gfx942 default space (20 of 103 variants).
TEST(ClangVersions, Gfx942SpaceAgreesBetweenClang19AndTheNewerClang) { check_clang_versions(false); }

// Label fullspace (not CI): every variant of the space.
TEST(ClangVersions, FullSpaceGfx942AgreesBetweenClang19AndTheNewerClang) { check_clang_versions(true); }

}  // namespace
}  // namespace ft
