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
    auto src = emit_backward(v);
    ASSERT_TRUE(src) << src.error().describe();
    auto object = compile(*src, target, test::compile_options_for(test::current_test_id(), std::nullopt));
    ASSERT_TRUE(object) << object.error().describe();
    auto r = analyze(*object, target, v.name(), v.threads(), v.lds_bytes());
    ASSERT_TRUE(r) << r.error().describe();
    EXPECT_EQ(test::check_matrix_ops(r->matrix_ops, atom, target), "") << v.name();
    EXPECT_FALSE(r->spills) << v.name() << ": " << r->notes;
    EXPECT_EQ(r->lds_bytes, v.lds_bytes()) << v.name();
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, BackwardCompile,
                         testing::Values(KTarget{"gfx942", DType::bf16},
                                         KTarget{"gfx950", DType::bf16}, KTarget{"sm_90a", DType::bf16},
                                         KTarget{"sm_90a", DType::f16}),
                         [](const auto& info) { return fmt::format("{}_{}", info.param.target, to_string(info.param.dtype)); });

}  // namespace
}  // namespace ft
