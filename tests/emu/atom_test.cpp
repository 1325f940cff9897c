// Every atom of every target, emulated, against a plain CPU matmul of the same
// operands (bitwise: the emulated instruction sums in k order, like the CPU
// loop); and a mutant atom whose operand layout is off must disagree.
#include <gtest/gtest.h>

#include <cmath>

#include "generator/atoms.hpp"
#include "tests/emu/emu_test_support.hpp"
#include "tuner/workload/atom_probe.hpp"

namespace ft::emu::test {
namespace {

std::vector<std::string> probe_entries(const Target& t) {
  std::vector<std::string> names;
  for (DType d : {DType::bf16, DType::f16})
    for (const AtomInfo* a : atoms_for(t, d)) names.push_back(atom_probe_entry(*a));
  names.push_back(t.is_nvidia() ? "ft_probe_broken_mma" : "ft_probe_broken_mfma");
  return names;
}

class EveryAtom : public ::testing::TestWithParam<const char*> {};

TEST_P(EveryAtom, EmulatedAtomEqualsCpuMatmul) {
  const Target& t = target(GetParam());
  auto l = load(t, unit_from_file("atom_probe.cpp", probe_entries(t)));
  ASSERT_TRUE(l) << l.error().describe();
  int atoms = 0;
  for (DType d : {DType::bf16, DType::f16})
    for (const AtomInfo* atom : atoms_for(t, d)) {
      ++atoms;
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
}

TEST_P(EveryAtom, MutantLayoutIsCaught) {
  const Target& t = target(GetParam());
  auto l = load(t, unit_from_file("atom_probe.cpp", probe_entries(t)));
  ASSERT_TRUE(l) << l.error().describe();
  const AtomInfo* base = find_atom(t.is_nvidia() ? "mma_m16n8k16_f32_bf16" : "mfma_f32_16x16x16_bf16");
  ASSERT_NE(base, nullptr);
  const AtomProbeInputs in = make_atom_probe_inputs(*base, 11, false);
  auto got = run_atom_probe(*l->device, l->fn(t.is_nvidia() ? "ft_probe_broken_mma" : "ft_probe_broken_mfma"), *base, in);
  ASSERT_TRUE(got) << got.error().describe();
  const std::vector<float> want = atom_probe_expected(in);
  double err2 = 0, ref2 = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err2 += double((*got)[i] - want[i]) * ((*got)[i] - want[i]);
    ref2 += double(want[i]) * want[i];
  }
  EXPECT_GT(std::sqrt(err2 / ref2), 0.3) << "a mutant operand layout went unnoticed";
}

INSTANTIATE_TEST_SUITE_P(Targets, EveryAtom, ::testing::Values("gfx90a", "gfx942", "gfx950", "sm_90a"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ft::emu::test
