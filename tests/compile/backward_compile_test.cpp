// The backward's GEMMs (generator/backward_gemm.hpp: the K-grouped GEMM and the
// two routed dgrad GEMMs) built by the real toolchains: one small
// configuration of each per target over its first 16-bit atom
// (clang-19 / comgr for the MFMA targets, clang >= 20 for gfx950, NVRTC for
// sm_90a's mma.sync) compiles, shows only that atom's matrix instruction, does
// not spill, and uses the LDS the generator computes. gfx90a is left out: its
// comgr build of the K-grouped GEMM keeps a 16-byte private segment (docs/TRAINING.md, "Still missing").
#include <gtest/gtest.h>

#include "compile/analyze/analyze.hpp"
#include "generator/backward_gemm.hpp"
#include "tests/compile/compile_test_support.hpp"

namespace ft {
namespace {

struct KTarget {
  const char* target;
  DType dtype;
};

// v's unit compiles for its target, shows only its atom's matrix instruction
// (none serialised by ptxas), does not spill and uses the LDS the generator computes.
void check_builds(const BackwardVariant& v) {
  const Target& target = *v.target;
  auto src = emit_backward(v);
  ASSERT_TRUE(src) << src.error().describe();
  auto object = compile(*src, target, test::compile_options_for(test::current_test_id(), std::nullopt));
  ASSERT_TRUE(object) << object.error().describe();
  auto r = analyze(*object, target, v.name(), v.threads(), v.lds_bytes());
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(test::check_matrix_ops(r->matrix_ops, *v.atom, target), "") << v.name();
  EXPECT_FALSE(r->spills) << v.name() << ": " << r->notes;
  EXPECT_FALSE(r->serialized_mma) << v.name() << ": " << r->notes;
  EXPECT_EQ(r->lds_bytes, v.lds_bytes()) << v.name();
}

class BackwardCompile : public testing::TestWithParam<KTarget> {};

TEST_P(BackwardCompile, BuildsWithTheAtomsInstructionAndNoSpills) {
  const Target& target = *find_target(GetParam().target);
  const auto atoms = atoms_for(target, GetParam().dtype);
  ASSERT_FALSE(atoms.empty());
  const AtomInfo& atom = *atoms.front();
  FT_SKIP_UNLESS_BUILDABLE(target);  // gfx950 needs LLVM >= 20 (scripts/setup-llvm.sh)
  for (BackwardOp op : {BackwardOp::wgrad, BackwardOp::dgrad_swiglu, BackwardOp::dgrad_scatter}) {
    const BackwardVariant v{&target, &atom, 2 * atom.m, std::max(64, 2 * atom.n), std::max(32, atom.k), 2, 2, 2, op};
    ASSERT_FALSE(why_illegal(v)) << v.name() << ": " << *why_illegal(v);
    check_builds(v);
  }
}

// The wgmma forms of the backward's GEMMs (templates/ft/moe_kgrouped_wgmma.hpp,
// moe_dgrad_wgmma.hpp): every configuration of sm_90a's default backward
// spaces, bf16 and f16, builds with NVRTC, shows wgmma only, keeps every wgmma
// unserialised, does not spill and uses the shared memory the generator computes.
TEST(BackwardWgmmaCompile, DefaultSpacesBuildUnserialisedWithoutSpills) {
  const Target& target = *find_target("sm_90a");
  FT_SKIP_UNLESS_BUILDABLE(target);
  for (BackwardOp op : {BackwardOp::wgrad, BackwardOp::dgrad_swiglu, BackwardOp::dgrad_scatter}) {
    int built = 0;
    for (DType d : {DType::bf16, DType::f16})
      for (const BackwardVariant& v : backward_space(target, d, Preset::default_, op)) {
        if (!v.atom->warpgroup()) continue;
        check_builds(v);
        ++built;
      }
    EXPECT_GE(built, 8) << to_string(op);  // two dtypes x (n128, n256) x (one, two warpgroups) x (3, 4 stages), less what the rules refuse
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, BackwardCompile,
                         testing::Values(KTarget{"gfx942", DType::bf16},
                                         KTarget{"gfx950", DType::bf16}, KTarget{"sm_90a", DType::bf16},
                                         KTarget{"sm_90a", DType::f16}),
                         [](const auto& info) { return fmt::format("{}_{}", info.param.target, to_string(info.param.dtype)); });

}  // namespace
}  // namespace ft
