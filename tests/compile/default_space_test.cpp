// The default Mixtral space of each target, compiled by the toolchain CI has
// for it and analysed: every variant compiles, disassembles with its atom's
// matrix instruction, does not spill, and uses exactly the LDS its Variant
// says (within the target's limit). gfx950 compiles where a capable toolchain
// exists (CI: Debian 13's clang-22 from scripts/setup-llvm.sh), and its own
// MFMA shapes appear in the code objects; elsewhere it skips with the reason.
// CI builds each space's covering sample (generator/space_sample.hpp: every
// value of every axis and every pair of two axes' values, in a few legal
// variants); the FullSpace tests build every variant (ctest label fullspace,
// not in scripts/test.sh: docs/PERFORMANCE.md's CI budget says when to run it).
#include <algorithm>
#include <map>
#include <set>

#include <gtest/gtest.h>

#include "generator/emitter.hpp"
#include "generator/families/families.hpp"
#include "generator/space.hpp"
#include "generator/space_sample.hpp"
#include "tests/compile/compile_test_support.hpp"
#include "compile/analyze/elf_image.hpp"
#include "search/compile_space.hpp"

namespace ft {
namespace {

using test::TargetBackend;

// Every check of one compiled variant, as a list of failures (empty: fine).
std::vector<std::string> problems_of(const CompiledVariant& cv, const Target& target) {
  std::vector<std::string> out;
  if (!cv.object) return {"does not compile: " + cv.object.error().describe()};
  if (!cv.resources) return {"not analysed: " + cv.analysis_error};
  const Resources& r = *cv.resources;
  if (auto why = test::check_matrix_ops(r.matrix_ops, *cv.variant.atom(), target); !why.empty()) out.push_back(why);
  if (r.spills)
    out.push_back(fmt::format("spills: scratch {} bytes, spill {} bytes ({}); VGPR {} AGPR {} SGPR {} regs {}",
                              r.scratch_bytes, r.spill_bytes, r.notes, r.vgprs, r.agprs, r.sgprs, r.regs));
  if (!cv.pruned_because.empty()) out.push_back("pruned: " + cv.pruned_because);
  if (r.occupancy <= 0) out.push_back(fmt::format("occupancy {} ({})", r.occupancy, r.notes));
  if (r.lds_bytes > target.lds_bytes) out.push_back(fmt::format("LDS {} bytes > limit {}", r.lds_bytes, target.lds_bytes));
  if (r.lds_bytes != cv.variant.lds_bytes())
    out.push_back(fmt::format("LDS {} bytes in the code object, Variant::lds_bytes() says {}", r.lds_bytes,
                              cv.variant.lds_bytes()));
  if (r.regs <= 0) out.push_back("no register count in the analysis");
  return out;
}

class DefaultSpace : public ::testing::TestWithParam<TargetBackend> {};

// Builds `tb`'s default Mixtral space -- every variant (whole) or its covering sample -- and checks each variant.
void check_default_space(const TargetBackend& tb, bool whole) {
  const Target& target = *find_target(tb.target);
  const Problem problem = test::mixtral();
  CompileSpaceOptions opt;
  // One cache folder for the sample and the whole space (the sample's objects are the whole space's).
  opt.compile = test::compile_options_for(test::default_space_cache(tb), tb.backend);
  opt.progress = false;
  if (!whole) opt.select = covering_sample;

  if (!tb.backend) {
    FT_SKIP_UNLESS_BUILDABLE(target);  // gfx950: built only where a capable comgr or clang exists
  } else {
    std::string missing = test::missing_toolchain(*tb.backend, target);
    ASSERT_EQ(missing, "") << "the compile suite needs clang-19, comgr and NVRTC";
  }

  auto cs = compile_space(target, problem, opt);
  ASSERT_TRUE(cs) << cs.error().describe();
  if (tb.backend) { EXPECT_EQ(cs->backend, *tb.backend) << "compiled by another backend"; }
  Space space = enumerate_space(target, problem, SpaceOptions{});
  EXPECT_GE(space.legal.size(), 24u) << "the default Mixtral space should hold at least 24 legal variants";
  if (whole) {
    EXPECT_EQ(cs->variants.size(), space.legal.size());
  } else {
    EXPECT_EQ(cs->selected_from, space.legal.size());
    EXPECT_EQ(cs->variants.size(), covering_sample(space.legal).size());
    ::testing::Test::RecordProperty("sampled", fmt::format("{} of {}", cs->variants.size(), space.legal.size()));
  }

  int compiled = 0;
  for (const CompiledVariant& cv : cs->variants) {
    auto found = problems_of(cv, target);
    for (const auto& p : found) ADD_FAILURE() << cv.variant.name() << ": " << p;
    compiled += cv.object.has_value();
    if (cv.resources)
      ::testing::Test::RecordProperty(cv.variant.name(), fmt::format("vgpr={} agpr={} sgpr={} regs={} lds={} occ={} {:.2f}s{}",
                                                    cv.resources->vgprs, cv.resources->agprs, cv.resources->sgprs,
                                                    cv.resources->regs, cv.resources->lds_bytes,
                                                    cv.resources->occupancy, cv.object->compile_seconds,
                                                    cv.object->from_cache ? " (cached)" : ""));
  }
  EXPECT_EQ(compiled, (int)cs->variants.size());

  // The matrix instructions only this target has (gfx950: the 16x16x32 and 32x32x16 MFMAs) are
  // in the code objects: the space uses every such atom of its dtype (the sample too: it holds every
  // atom of the space). (AMD: atoms name the mnemonic; NVIDIA's PTX opcodes are checked per variant above.)
  std::map<std::string, int> variants_with;
  for (const CompiledVariant& cv : cs->variants)
    if (cv.resources)
      for (const auto& [mnemonic, count] : cv.resources->matrix_ops) variants_with[mnemonic] += count > 0;
  for (const AtomInfo* atom : atoms_for(target, problem.dtype)) {
    bool only_here = std::none_of(all_targets().begin(), all_targets().end(), [&](const Target& other) {
      return other.name != target.name && atom->available_on(other.name);
    });
    if (only_here && target.is_amd()) {
      EXPECT_GT(variants_with[std::string(atom->mnemonic_on(target))], 0)
          << target.name << "-only " << atom->mnemonic_on(target) << " is in no code object of the space";
    }
  }
  for (const auto& [mnemonic, n] : variants_with) ::testing::Test::RecordProperty("variants_with_" + mnemonic, n);

  // The support unit (align, reduce, shuffle, reference, fill) and all its entry points.
  ASSERT_TRUE(cs->support) << cs->support.error().describe();
  auto image = ElfImage::parse(cs->support->binary);
  ASSERT_TRUE(image) << image.error().describe();
  for (const auto& entry : cs->support_source.entry_points)
    EXPECT_NE(image->symbol(entry), nullptr) << "support unit lacks " << entry;
}

// CI: the covering sample (sm_90a: 50 of 649 variants).
TEST_P(DefaultSpace, CoveringSampleCompilesDisassemblesAndFits) { check_default_space(GetParam(), false); }

// Label fullspace (not CI): every variant, e.g. before changing a template.
TEST_P(DefaultSpace, FullSpaceEveryVariantCompilesDisassemblesAndFits) { check_default_space(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Mixtral, DefaultSpace,
                         ::testing::Values(TargetBackend{"gfx942", Backend::clang}, TargetBackend{"gfx90a", Backend::comgr},
                                           TargetBackend{"sm_90a", Backend::nvrtc}, TargetBackend{"gfx950", std::nullopt}),
                         [](const auto& info) { return test::param_name(info.param); });

// fp8 (e4m3) on AMD: the small space of the Mixtral problem in every scale mode (static too),
// in the target's flavour (gfx942 fnuz, gfx950 OCP): every variant and the e4m3
// support unit compile, disassemble with the atom's fp8 MFMA and fit.
class Fp8Space : public ::testing::TestWithParam<TargetBackend> {};

void check_fp8_space(const TargetBackend& tb, bool whole) {
  const Target& target = *find_target(tb.target);
  if (!tb.backend) {
    FT_SKIP_UNLESS_BUILDABLE(target);
  } else {
    ASSERT_EQ(test::missing_toolchain(*tb.backend, target), "") << "the compile suite needs clang-19";
  }
  for (Scales scales : {Scales::per_tensor, Scales::per_token, Scales::block128, Scales::static_tensor}) {
    Problem problem = test::mixtral();
    problem.dtype = DType::e4m3;
    problem.scales = scales;
    CompileSpaceOptions opt;
    opt.space = SpaceOptions::parse("small").value();
    // One cache folder for the sample and the whole space.
    opt.compile = test::compile_options_for("Mixtral_Fp8Space_" + test::param_name(tb), tb.backend);
    opt.progress = false;
    if (!whole) opt.select = covering_sample;
    auto cs = compile_space(target, problem, opt);
    ASSERT_TRUE(cs) << cs.error().describe();
    const std::size_t legal = enumerate_space(target, problem, opt.space).legal.size();
    EXPECT_GE(legal, 4u) << to_string(scales) << ": the small fp8 space should hold a few variants";
    EXPECT_EQ(cs->variants.size(), whole ? legal : covering_sample(enumerate_space(target, problem, opt.space).legal).size());
    for (const CompiledVariant& cv : cs->variants) {
      EXPECT_EQ(cv.variant.dtype, DType::e4m3);
      for (const auto& p : problems_of(cv, target)) ADD_FAILURE() << cv.variant.name() << ": " << p;
    }
    ASSERT_TRUE(cs->support) << cs->support.error().describe();
    auto image = ElfImage::parse(cs->support->binary);
    ASSERT_TRUE(image) << image.error().describe();
    for (const auto& entry : cs->support_source.entry_points)
      EXPECT_NE(image->symbol(entry), nullptr) << "e4m3 support unit lacks " << entry;
  }
}

// CI: each scale mode's covering sample (sm_90a: 23 of 66 per-tensor variants, 19 of 30 block128).
TEST_P(Fp8Space, CoveringSampleCompilesDisassemblesAndFits) { check_fp8_space(GetParam(), false); }

// Label fullspace (not CI): every variant of the small fp8 spaces.
TEST_P(Fp8Space, FullSpaceEveryVariantCompilesDisassemblesAndFits) { check_fp8_space(GetParam(), true); }

INSTANTIATE_TEST_SUITE_P(Mixtral, Fp8Space,
                         ::testing::Values(TargetBackend{"gfx942", Backend::clang}, TargetBackend{"gfx950", std::nullopt},
                                           TargetBackend{"sm_90a", Backend::nvrtc}),
                         [](const auto& info) { return test::param_name(info.param); });

// sm_90a's big fp8 stage-1 tiles: without promotion (promote = 0, one
// accumulator set) m128n128 on two consumer warpgroups and m64n128 / m128n64
// on one compile with no spills and unserialised wgmma (problems_of), with and
// without quantise-on-store, m128n128 also with a producer warpgroup (one tile
// and persistent), per-tensor and per-token; promoting every k-tile
// they need a second set, which the legality's register estimate refuses.
class Fp8BigTiles : public ::testing::TestWithParam<Scales> {};

TEST_P(Fp8BigTiles, FastAccumulationFitsWithoutSpills) {
  const Target& target = *find_target("sm_90a");
  ASSERT_EQ(test::missing_toolchain(Backend::nvrtc, target), "") << "the compile suite needs NVRTC";
  Problem problem = test::mixtral();
  problem.dtype = DType::e4m3;
  problem.scales = GetParam();
  const std::string tag(GetParam() == Scales::per_tensor ? "tensor" : "token");
  const std::set<std::string> wanted{
      "ft_sm_90a_moe1_e4m3_m128n128k128_w8x1_wgmma_s4_" + tag + "_fastacc",
      "ft_sm_90a_moe1_e4m3_m128n128k128_w8x1_wgmma_s4_" + tag + "_qstore_fastacc",
      "ft_sm_90a_moe1_e4m3_m64n128k128_w4x1_wgmma_s4_" + tag + "_fastacc",
      "ft_sm_90a_moe1_e4m3_m64n128k128_w4x1_wgmma_s4_" + tag + "_qstore_fastacc",
      "ft_sm_90a_moe1_e4m3_m128n64k128_w4x1_wgmma_s4_" + tag + "_fastacc",
      "ft_sm_90a_moe1_e4m3_m128n128k128_w8x1_wgmma_s4_tiled_ws_" + tag + "_fastacc",
      "ft_sm_90a_moe1_e4m3_m128n128k128_w8x1_wgmma_s4_tiled_ws_t8_dyn_" + tag + "_fastacc"};
  const std::string axes = "atom=wgmma_m64k32_f32_e4m3;kind=moe1;wgmma_tile_m=64,128;wgmma_tile_n=64,128;wgmma_stages=4";
  CompileSpaceOptions opt;
  opt.space = SpaceOptions::parse(axes + ";promote=0").value();
  opt.compile = test::compile_options_for(test::current_test_id(), Backend::nvrtc);
  opt.progress = false;
  // Only the variants checked below are built (the space's 13 others were built and never looked at).
  opt.select = [&](std::span<const Variant> legal) {
    std::vector<Variant> out;
    for (const Variant& v : legal)
      if (wanted.contains(v.name())) out.push_back(v);
    return out;
  };
  auto cs = compile_space(target, problem, opt);
  ASSERT_TRUE(cs) << cs.error().describe();
  std::set<std::string> seen;
  for (const CompiledVariant& cv : cs->variants) {
    if (!wanted.contains(cv.variant.name())) continue;
    seen.insert(cv.variant.name());
    for (const auto& p : problems_of(cv, target)) ADD_FAILURE() << cv.variant.name() << ": " << p;
    ASSERT_TRUE(cv.resources) << cv.variant.name();
    EXPECT_EQ(cv.resources->spill_bytes, 0) << cv.variant.name();
    ::testing::Test::RecordProperty(cv.variant.name(), fmt::format("regs={}", cv.resources->regs));
  }
  EXPECT_EQ(seen, wanted) << "the fast-accumulation big tiles are not all in the space";

  // Promoting every k-tile, the same tiles are refused before compiling.
  Space promoting = enumerate_space(target, problem, SpaceOptions::parse(axes + ";promote=1").value());
  for (const Variant& v : promoting.legal) {
    const int per_group = v.get("tile_m") / (v.get("warps_m") / 4) * v.get("tile_n");
    EXPECT_LT(per_group, 64 * 128) << v.name() << " promotes with 2 x " << per_group / 64 << " accumulators per lane";
  }
}

// sm_90a's fp8 stages promoting in a producer warpgroup's consumers: stage 2
// (every scale mode promotes its intermediate's group scales) m128n128 on two
// consumer warpgroups, and block128's stage 1 m128n64, compile with no spills
// and unserialised wgmma (problems_of: ptxas's serialisation warnings would
// prune them); their persistent forms (ptxas 13.0 serialised several) are
// refused by the legality.
TEST(Fp8ProducerPromotion, CompilesWithoutSpillsOrSerialisedWgmma) {
  const Target& target = *find_target("sm_90a");
  ASSERT_EQ(test::missing_toolchain(Backend::nvrtc, target), "") << "the compile suite needs NVRTC";
  struct Case {
    Scales scales;
    const char* axes;
    std::set<std::string> wanted;
  };
  const std::string common = "atom=wgmma_m64k32_f32_e4m3;wgmma_stages=4;wgmma_producer=on;wgmma_tiles=1,8;";  // 8: refused
  const std::vector<Case> cases{
      {Scales::per_tensor, "kind=moe2;wgmma_tile_m=128;wgmma_tile_n=128;wgmma_warps=8x1;split_k=1;reduce=atomic",
       {"ft_sm_90a_moe2_e4m3_m128n128k128_w8x1_wgmma_s4_atomic_tiled_ws_tensor"}},
      {Scales::block128, "kind=moe2;wgmma_tile_m=128;wgmma_tile_n=128;wgmma_warps=8x1;split_k=1;reduce=atomic",
       {"ft_sm_90a_moe2_e4m3_m128n128k128_w8x1_wgmma_s4_atomic_tiled_ws_block128"}},
      {Scales::block128, "kind=moe1;wgmma_tile_m=128;wgmma_tile_n=64;wgmma_warps=8x1",
       {"ft_sm_90a_moe1_e4m3_m128n64k128_w8x1_wgmma_s4_tiled_ws_block128"}}};
  for (const Case& c : cases) {
    Problem problem = test::mixtral();
    problem.dtype = DType::e4m3;
    problem.scales = c.scales;
    CompileSpaceOptions opt;
    auto space = SpaceOptions::parse(common + c.axes);
    ASSERT_TRUE(space) << space.error().describe();
    opt.space = *space;
    opt.compile = test::compile_options_for(test::current_test_id(), Backend::nvrtc);
    opt.progress = false;
    auto cs = compile_space(target, problem, opt);
    ASSERT_TRUE(cs) << cs.error().describe();
    std::set<std::string> seen;
    for (const CompiledVariant& cv : cs->variants) {
      if (!c.wanted.contains(cv.variant.name())) continue;
      seen.insert(cv.variant.name());
      for (const auto& p : problems_of(cv, target)) ADD_FAILURE() << cv.variant.name() << ": " << p;
      ASSERT_TRUE(cv.resources) << cv.variant.name();
      ::testing::Test::RecordProperty(cv.variant.name(), fmt::format("regs={}", cv.resources->regs));
    }
    EXPECT_EQ(seen, c.wanted) << "the promoting producer-warpgroup variants are not all in the space";
    for (const CompiledVariant& cv : cs->variants)  // row scales with promote 0 (_fastacc) may be persistent
      if (fp8::promotes(cv.variant)) {
        EXPECT_LE(cv.variant.get("tiles_per_block"), 1) << cv.variant.name() << ": persistent and promoting";
      }
  }
}

// Register rebalance (wgmma_regs=rebalance, docs/HOPPER.md): the m192n256 stage 2
// on three consumer warpgroups, fp8 row scales and bf16, compiles with no spills
// and unserialised wgmma at 160 consumer and 32 producer registers; the
// rebalanced m192n128 stage 1 is pruned (its producer spills at 32), which the
// space reports rather than hides. The static tile walk: with the dynamic one
// (the default since 8881d61) the rebalanced producer's ticket loop spills 56
// bytes at 32 registers, so those variants are pruned the same way.
TEST(Rebalance, Sm90aStage2CompilesWithoutSpillsOrSerialisedWgmma) {
  const Target& target = *find_target("sm_90a");
  ASSERT_EQ(test::missing_toolchain(Backend::nvrtc, target), "") << "the compile suite needs NVRTC";
  struct Case {
    DType dtype;
    const char* axes;
    std::string wanted;
  };
  const std::vector<Case> cases{
      {DType::e4m3, "atom=wgmma_m64k32_f32_e4m3;inter_scales=row;promote=0",
       "ft_sm_90a_moe2_e4m3_m192n256k128_w12x1_wgmma_s3_atomic_tiled_ws_t8_rb_tensor_rowscale_fastacc"},
      {DType::bf16, "atom=wgmma_m64k16_f32_bf16", "ft_sm_90a_moe2_bf16_m192n256k64_w12x1_wgmma_s3_atomic_tiled_ws_t8_rb"}};
  for (const Case& c : cases) {
    Problem problem = test::mixtral();
    problem.dtype = c.dtype;
    if (c.dtype == DType::e4m3) problem.scales = Scales::per_tensor;
    CompileSpaceOptions opt;
    auto space = SpaceOptions::parse(std::string(c.axes) +
                                     ";kind=moe2;wgmma_regs=rebalance;wgmma_warps=12x1;wgmma_tile_m=192;wgmma_tile_n=256;"
                                     "wgmma_producer=on;wgmma_tiles=8;wgmma_sched=static;wgmma_stages=3;split_k=1;reduce=atomic");
    ASSERT_TRUE(space) << space.error().describe();
    opt.space = *space;
    opt.compile = test::compile_options_for(test::current_test_id(), Backend::nvrtc);
    opt.progress = false;
    auto cs = compile_space(target, problem, opt);
    ASSERT_TRUE(cs) << cs.error().describe();
    bool seen = false;
    for (const CompiledVariant& cv : cs->variants) {
      if (cv.variant.name() != c.wanted) continue;
      seen = true;
      for (const auto& p : problems_of(cv, target)) ADD_FAILURE() << cv.variant.name() << ": " << p;
    }
    EXPECT_TRUE(seen) << c.wanted << " is not in the space";
  }
}

INSTANTIATE_TEST_SUITE_P(Sm90a, Fp8BigTiles, ::testing::Values(Scales::per_tensor, Scales::per_token),
                         [](const auto& info) { return info.param == Scales::per_tensor ? "pertensor" : "pertoken"; });

// The support unit on its own, per target (the f16 one too).
class SupportUnit : public ::testing::TestWithParam<TargetBackend> {};

TEST_P(SupportUnit, CompilesWithEveryEntryPoint) {
  const Target& target = *find_target(GetParam().target);
  ASSERT_EQ(test::missing_toolchain(*GetParam().backend, target), "");
  for (DType dtype : {DType::bf16, DType::f16}) {
    KernelSource src = emit_support(target, dtype);
    auto object = compile(src, target, test::compile_options_for(test::current_test_id(), GetParam().backend));
    ASSERT_TRUE(object) << object.error().describe();
    EXPECT_EQ(object->backend, *GetParam().backend);
    auto image = ElfImage::parse(object->binary);
    ASSERT_TRUE(image) << image.error().describe();
    EXPECT_EQ(image->machine(), target.is_amd() ? kElfMachineAmdgpu : kElfMachineCuda);
    EXPECT_FALSE(src.entry_points.empty());
    for (const auto& entry : src.entry_points) EXPECT_NE(image->symbol(entry), nullptr) << src.name << " lacks " << entry;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, SupportUnit,
                         ::testing::Values(TargetBackend{"gfx942", Backend::clang}, TargetBackend{"gfx90a", Backend::comgr},
                                           TargetBackend{"sm_90a", Backend::nvrtc}),
                         [](const auto& info) { return test::param_name(info.param); });

// gfx950's support unit, by whatever builds gfx950 here (a clang >= 20 in CI), with every entry point.
TEST(Gfx950, SupportUnitCompilesWithANewerLlvm) {
  const Target& target = *find_target("gfx950");
  FT_SKIP_UNLESS_BUILDABLE(target);
  if (*backend_for(target) == Backend::clang) {
    EXPECT_GE(toolchains().clang_for(target.name)->major, target.min_llvm_major);
  }
  for (DType dtype : {DType::bf16, DType::f16}) {
    KernelSource src = emit_support(target, dtype);
    auto object = compile(src, target, test::compile_options_for(test::current_test_id(), std::nullopt));
    ASSERT_TRUE(object) << object.error().describe();
    auto image = ElfImage::parse(object->binary);
    ASSERT_TRUE(image) << image.error().describe();
    for (const auto& entry : src.entry_points) EXPECT_NE(image->symbol(entry), nullptr) << src.name << " lacks " << entry;
  }
}

}  // namespace
}  // namespace ft
