// Every row of the atom tables (templates/ft/atoms_*.def), on every target the
// row lists: one small stage-1 variant using that atom compiles, and its code
// object shows that atom's matrix instruction (AMD: the mnemonic LLVM's
// disassembler prints; NVIDIA: the PTX mma opcode).
#include <gtest/gtest.h>

#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "tests/compile/compile_test_support.hpp"
#include "tuner/analyze/analyze.hpp"

namespace ft {
namespace {

struct AtomRow {
  const AtomInfo* atom;
  const Target* target;
};
void PrintTo(const AtomRow& row, std::ostream* os) { *os << row.target->name << " " << row.atom->id; }

std::vector<AtomRow> all_rows() {
  std::vector<AtomRow> rows;
  for (const AtomInfo& a : all_atoms())
    for (const Target& t : all_targets())
      if (a.available_on(t.name)) rows.push_back({&a, &t});
  return rows;
}

// The smallest legal stage-1 tile for the atom: 2x2 waves of one atom each in
// M and N (N at least 64, which every problem's sizes divide), K = 32; for a
// wgmma atom, one warpgroup on a 64 x (2 x 32) tile.
Variant small_variant(const AtomInfo& atom, const Target& target) {
  Variant v = Variant::of(target, StageRole::stage1, atom);
  v.set("warps_m", 2);
  v.set("warps_n", 2);
  v.set("tile_m", 2 * atom.m);
  v.set("tile_n", std::max(64, 2 * atom.n));
  v.set("tile_k", std::max(32, atom.k));
  v.set("stages", 2);
  if (atom.warpgroup()) {  // one warpgroup, N = 2 x 32, one 64-deep swizzle row per k-tile
    v.set("warps_m", 4);
    v.set("warps_n", 1);
    v.set("tile_m", atom.m);
    v.set("tile_n", 32);
    v.set("tile_k", 64);
    v.set("stages", 3);
  }
  return v;
}

class AtomRows : public ::testing::TestWithParam<AtomRow> {};

TEST_P(AtomRows, CompilesAndDisassemblesToItsInstruction) {
  const AtomInfo& atom = *GetParam().atom;
  const Target& target = *GetParam().target;
  Problem problem = test::mixtral(atom.dtype);
  Variant v = small_variant(atom, target);
  auto illegal = why_illegal(v, problem);
  ASSERT_FALSE(illegal) << v.name() << ": " << *illegal;

  FT_SKIP_UNLESS_BUILDABLE(target);  // gfx950 needs LLVM >= 20 (scripts/setup-llvm.sh)
  CompileOptions options = test::compile_options_for(test::current_test_id(), std::nullopt);
  KernelSource src = emit_variant(v);
  auto object = compile(src, target, options);
  ASSERT_TRUE(object) << object.error().describe();
  auto r = analyze(*object, target, v.name(), v.threads(), v.lds_bytes());
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(test::check_matrix_ops(r->matrix_ops, atom, target), "") << v.name();
  EXPECT_FALSE(r->spills) << v.name() << ": " << r->notes;
  EXPECT_EQ(r->lds_bytes, v.lds_bytes()) << v.name();
}

INSTANTIATE_TEST_SUITE_P(Defs, AtomRows, ::testing::ValuesIn(all_rows()), [](const auto& info) {
  return fmt::format("{}_{}", info.param.target->name, info.param.atom->id);
});

// The parameter list itself: every row is on at least one target, and every
// target has a bf16 and an f16 atom.
TEST(AtomTables, EveryRowHasATargetAndEveryTargetHasAtoms) {
  for (const AtomInfo& a : all_atoms()) {
    bool any = false;
    for (const Target& t : all_targets()) any = any || a.available_on(t.name);
    EXPECT_TRUE(any) << a.id << " lists no known target: " << a.targets;
  }
  for (const Target& t : all_targets())
    for (DType d : {DType::bf16, DType::f16}) EXPECT_FALSE(atoms_for(t, d).empty()) << t.name << " " << to_string(d);
}

}  // namespace
}  // namespace ft
