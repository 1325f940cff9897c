// Every row of the atom tables (templates/ft/atoms_*.def), on every target the
// row lists: one small stage-1 variant using that atom compiles (a 16-bit row),
// or the atom's probe kernel does (an fp8 row, until fp8 stage kernels exist:
// tests/emu/units/atom_probe.cpp), and its code object shows that atom's matrix
// instruction (AMD: the mnemonic LLVM's disassembler prints; NVIDIA: the PTX mma
// opcode). An fp8 row of one flavour fails to compile for the other flavour's target.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "tests/compile/compile_test_support.hpp"
#include "compile/analyze/analyze.hpp"
#include "measure/workload/atom_probe.hpp"

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

// The probe unit (the emulator tests' own file), naming the given entries.
KernelSource probe_unit(std::vector<std::string> entries) {
  std::ifstream in(FT_ATOM_PROBE_UNIT);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << "cannot read " << FT_ATOM_PROBE_UNIT;
  return KernelSource{"atom_probe", ss.str(), std::move(entries)};
}

// An fp8 row: its probe kernel (one wave / warp, or a warpgroup and its shared
// memory for wgmma) compiles for the target and shows the row's instruction.
void check_fp8_probe(const AtomInfo& atom, const Target& target) {
  const std::string entry = atom_probe_entry(atom);
  CompileOptions options = test::compile_options_for(test::current_test_id(), std::nullopt);
  auto object = compile(probe_unit({entry}), target, options);
  ASSERT_TRUE(object) << object.error().describe();
  const int threads = atom.warpgroup() ? 128 : atom.lanes;
  auto r = analyze(*object, target, entry, threads, atom.warpgroup() ? kWgmmaProbeSharedBytes : 0);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(test::check_matrix_ops(r->matrix_ops, atom, target), "") << entry;
  EXPECT_FALSE(r->spills) << entry << ": " << r->notes;
}

class AtomRows : public ::testing::TestWithParam<AtomRow> {};

TEST_P(AtomRows, CompilesAndDisassemblesToItsInstruction) {
  const AtomInfo& atom = *GetParam().atom;
  const Target& target = *GetParam().target;
  if (atom.dtype == DType::e4m3) {
    FT_SKIP_UNLESS_BUILDABLE(target);  // gfx950 needs LLVM >= 20 (scripts/setup-llvm.sh)
    check_fp8_probe(atom, target);
    return;
  }
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

// The parameter list itself: every row is on at least one target, every target
// has a bf16 and an f16 atom, and every target with an fp8 flavour an fp8 one.
TEST(AtomTables, EveryRowHasATargetAndEveryTargetHasAtoms) {
  for (const AtomInfo& a : all_atoms()) {
    bool any = false;
    for (const Target& t : all_targets()) any = any || a.available_on(t.name);
    EXPECT_TRUE(any) << a.id << " lists no known target: " << a.targets;
  }
  for (const Target& t : all_targets()) {
    for (DType d : {DType::bf16, DType::f16}) EXPECT_FALSE(atoms_for(t, d).empty()) << t.name << " " << to_string(d);
    EXPECT_EQ(atoms_for(t, DType::e4m3).empty(), t.fp8 == Fp8Flavour::none) << t.name;
  }
}

// A unit calling one MFMA atom's mma on bytes (the smallest use of an fp8 row).
KernelSource one_mfma_use(std::string_view atom) {
  return KernelSource{"ft_one_mfma",
                      fmt::format("#include \"ft/kernels.hpp\"\n"
                                  "FT_KERNEL(64, ft_one_mfma)(const ft::u8* a, float* c) {{\n"
                                  "  ft::u8 av[8] = {{a[0]}}, bv[8] = {{a[1]}};\n"
                                  "  float cv[ft::atom::{0}::c_regs] = {{}};\n"
                                  "  ft::atom::{0}::mma(cv, av, bv);\n  c[0] = cv[0];\n}}\n",
                                  atom),
                      {"ft_one_mfma"}};
}

// An fp8 MFMA row compiled for the target of the other flavour must not build:
// the same builtin would read its bytes in the wrong format there (atom_mfma.hpp's
// static_assert), and for gfx90a, which has no fp8 MFMA, it must not build either.
// The same unit for the row's own target builds (so the failures are the rows').
TEST(AtomTables, Fp8RowOfTheOtherFlavourFailsToCompile) {
  struct Case {
    const char* atom;
    const char* target;
    const char* why;  // a piece of the expected error; nullptr: it must compile
  };
  for (const Case& c : {Case{"mfma_f32_16x16x32_e4m3fnuz", "gfx950", "fp8 atom's operand format"},
                        Case{"mfma_f32_16x16x32_e4m3", "gfx942", "fp8 atom's operand format"},
                        Case{"mfma_f32_16x16x32_e4m3fnuz", "gfx90a", "not available"},
                        Case{"mfma_f32_16x16x32_e4m3fnuz", "gfx942", nullptr},
                        Case{"mfma_f32_16x16x32_e4m3", "gfx950", nullptr}}) {
    const Target& target = *find_target(c.target);
    if (!backend_for(target)) {
      if (test::toolchain_expected(target)) ADD_FAILURE() << "FLYTUNE_EXPECT_TARGETS lists " << c.target;
      std::printf("skipped %s on %s: %s\n", c.atom, c.target, backend_for(target).error().describe().c_str());
      continue;
    }
    CompileOptions options;
    options.cache_dir = "none";
    auto object = compile(one_mfma_use(c.atom), target, options);
    if (!c.why) {
      EXPECT_TRUE(object) << c.atom << " on " << c.target << ": " << object.error().describe();
      continue;
    }
    ASSERT_FALSE(object) << c.atom << " compiled for " << c.target;
    EXPECT_NE(object.error().describe().find(c.why), std::string::npos) << object.error().describe();
  }
}

}  // namespace
}  // namespace ft
