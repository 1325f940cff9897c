// Every atom of every target, emulated, against a plain CPU matmul of the same
// operands (bitwise: the emulated instruction sums in k order, like the CPU
// loop); and mutant atoms whose operand layout is off, or which read gfx942's
// fnuz bytes as OCP e4m3, must disagree.
#include <gtest/gtest.h>

#include <cmath>

#include "generator/atoms.hpp"
#include "tests/emu/emu_test_support.hpp"
#include "measure/workload/atom_probe.hpp"

namespace ft::emu::test {
namespace {

constexpr DType kDtypes[] = {DType::bf16, DType::f16, DType::e4m3};

// The mutant probes of a target's unit (tests/emu/units/atom_probe.cpp), each
// with the atom whose inputs it is fed.
struct Mutant {
  const char* entry;
  const char* atom;
};
std::vector<Mutant> mutants(const Target& t) {
  if (t.is_nvidia())
    return {{"ft_probe_broken_mma", "mma_m16n8k16_f32_bf16"}, {"ft_probe_broken_mma_e4m3", "mma_m16n8k32_f32_e4m3"}};
  std::vector<Mutant> m{{"ft_probe_broken_mfma", "mfma_f32_16x16x16_bf16"}};
  if (t.fp8 == Fp8Flavour::fnuz) {
    m.push_back({"ft_probe_broken_mfma_fp8", "mfma_f32_16x16x32_e4m3fnuz"});
    m.push_back({"ft_probe_fnuz_read_as_ocp", "mfma_f32_16x16x32_e4m3fnuz"});
  }
  if (t.fp8 == Fp8Flavour::ocp) m.push_back({"ft_probe_broken_mfma_fp8", "mfma_f32_16x16x32_e4m3"});
  return m;
}

std::vector<std::string> probe_entries(const Target& t) {
  std::vector<std::string> names;
  for (DType d : kDtypes)
    for (const AtomInfo* a : atoms_for(t, d)) names.push_back(atom_probe_entry(*a));
  for (const Mutant& m : mutants(t)) names.push_back(m.entry);
  return names;
}

class EveryAtom : public ::testing::TestWithParam<const char*> {};

TEST_P(EveryAtom, EmulatedAtomEqualsCpuMatmul) {
  const Target& t = target(GetParam());
  auto l = load(t, unit_from_file("atom_probe.cpp", probe_entries(t)));
  ASSERT_TRUE(l) << l.error().describe();
  int atoms = 0, fp8_atoms = 0;
  for (DType d : kDtypes)
    for (const AtomInfo* atom : atoms_for(t, d)) {
      ++atoms;
      fp8_atoms += d == DType::e4m3;
      for (bool exact : {true, false}) {
        const AtomProbeInputs in = make_atom_probe_inputs(*atom, 7, exact);
        auto got = run_atom_probe(*l->device, l->fn(atom_probe_entry(*atom)), *atom, in);
        ASSERT_TRUE(got) << got.error().describe();
        const std::vector<float> want = atom_probe_expected(in);
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(std::bit_cast<std::uint32_t>((*got)[i]), std::bit_cast<std::uint32_t>(want[i]))
              << atom->id << (exact ? " exact" : " random") << " C[" << i / std::size_t(in.n) << ", "
              << i % std::size_t(in.n) << "]: " << (*got)[i] << " vs " << want[i];
      }
    }
  EXPECT_GE(atoms, t.is_nvidia() ? 2 : 4);
  // Every target with an fp8 flavour has its fp8 atoms here (gfx942 and gfx950: two
  // MFMA shapes; sm_90a: mma.sync m16n8k32 and wgmma k32).
  EXPECT_EQ(fp8_atoms, t.fp8 == Fp8Flavour::none ? 0 : 2) << t.name;
}

// The fp8 probe inputs do what the atom test relies on: both signs, values the
// encoder saturated to +-max, and subnormals (random inputs), in the row's format.
TEST_P(EveryAtom, Fp8InputsCoverSaturationSignsAndSubnormals) {
  const Target& t = target(GetParam());
  for (const AtomInfo* atom : atoms_for(t, DType::e4m3)) {
    const AtomProbeInputs in = make_atom_probe_inputs(*atom, 7, false);
    const float max = atom->operand == Elem::e4m3fnuz ? 240.0f : 448.0f;
    int saturated = 0, negative = 0, subnormal = 0;
    for (int r = 0; r < in.m; ++r)
      for (int k = 0; k < in.k; ++k) {
        const float v = in.a_at(r, k);
        saturated += std::fabs(v) == max;
        negative += v < 0;
        subnormal += v != 0 && std::fabs(v) < (atom->operand == Elem::e4m3fnuz ? 0x1p-7f : 0x1p-6f);
      }
    EXPECT_GT(saturated, 0) << atom->id;
    EXPECT_GT(negative, in.m * in.k / 4) << atom->id;
    EXPECT_GT(subnormal, 0) << atom->id;
  }
}

TEST_P(EveryAtom, MutantsAreCaught) {
  const Target& t = target(GetParam());
  auto l = load(t, unit_from_file("atom_probe.cpp", probe_entries(t)));
  ASSERT_TRUE(l) << l.error().describe();
  for (const Mutant& m : mutants(t)) {
    const AtomInfo* base = find_atom(m.atom);
    ASSERT_NE(base, nullptr) << m.atom;
    // Seed 9 with exact inputs is what the H200 cross-check feeds the NVIDIA mutants.
    for (std::uint64_t seed : {9, 11})
      for (bool exact : {true, false}) {
        const AtomProbeInputs in = make_atom_probe_inputs(*base, seed, exact);
        auto got = run_atom_probe(*l->device, l->fn(m.entry), *base, in);
        ASSERT_TRUE(got) << got.error().describe();
        // Most outputs must change: a mutant that moves a few values is not caught by luck.
        const double differ = fraction_differing(*got, atom_probe_expected(in));
        EXPECT_GT(differ, 0.5) << m.entry << (exact ? " exact" : " random") << ": the mutant went unnoticed";
        std::printf("%s (%s, seed %llu): %.0f%% of the outputs differ\n", m.entry, exact ? "exact" : "random",
                    (unsigned long long)seed, 100 * differ);
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, EveryAtom, ::testing::Values("gfx90a", "gfx942", "gfx950", "sm_90a"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ft::emu::test
