// The emulator checked against hardware: each sm_90a matrix atom, fed the same
// operands through the same lane layout on the H200 and in emulation, must give
// the same bits (exact small-integer inputs make every summation order agree),
// and a probe with a deliberately wrong layout must disagree on the hardware too.
#include <gtest/gtest.h>

#include <cstring>

#include <fmt/format.h>

#include "generator/atoms.hpp"
#include "generator/embedded_file.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "tuner/compile/compile.hpp"
#include "tuner/device/runtimes.hpp"
#include "tuner/workload/atom_probe.hpp"

namespace ft::test {
std::span<const EmbeddedFile> probe_sources();  // tests/emu/units/atom_probe.cpp, embedded at build time
}

namespace ft {
namespace {

std::unique_ptr<Device> cuda_or_skip(std::string& why) {
  auto d = open_device("cuda:0");
  if (!d) {
    why = d.error().describe();
    return nullptr;
  }
  return std::move(*d);
}

TEST(AtomCrossCheck, EmulatedAtomsEqualH200Bitwise) {
  std::string why;
  auto dev = cuda_or_skip(why);
  if (!dev) GTEST_SKIP() << "skipped: no GPU (" << why << ")";
  const Target& target = *find_target("sm_90a");
  std::vector<std::string> entries;
  // mma.sync atoms through their lane fragments; wgmma atoms through a
  // swizzled shared-memory tile and descriptors (N = 64).
  std::vector<const AtomInfo*> atoms;
  for (DType d : {DType::bf16, DType::f16})
    for (const AtomInfo* a : atoms_for(target, d)) atoms.push_back(a);
  for (const AtomInfo* a : atoms) entries.push_back(atom_probe_entry(*a));
  entries.push_back("ft_probe_broken_mma");
  KernelSource src{"atom_probe", std::string(test::probe_sources()[0].text), entries};
  CompileOptions opt;
  opt.cache_dir = "none";
  auto co = compile(src, target, opt);
  ASSERT_TRUE(co) << co.error().describe();
  auto module = dev->load_module(co->binary);
  ASSERT_TRUE(module) << module.error().describe();

  for (const AtomInfo* a : atoms) {
    auto fn = dev->function(*module, atom_probe_entry(*a));
    ASSERT_TRUE(fn) << fn.error().describe();
    double worst_ulps = 0;
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
      AtomProbeInputs in = make_atom_probe_inputs(*a, seed, /*exact=*/true);
      auto gpu = run_atom_probe(*dev, *fn, *a, in);
      ASSERT_TRUE(gpu) << gpu.error().describe();
      std::vector<float> emu = atom_probe_expected(in);
      ASSERT_EQ(gpu->size(), emu.size());
      EXPECT_EQ(0, std::memcmp(gpu->data(), emu.data(), emu.size() * sizeof(float))) << a->id << " seed " << seed;
      // Random (inexact) operands: the tensor cores may round sums differently; report how far.
      AtomProbeInputs rnd = make_atom_probe_inputs(*a, seed, /*exact=*/false);
      auto g2 = run_atom_probe(*dev, *fn, *a, rnd);
      ASSERT_TRUE(g2);
      std::vector<float> e2 = atom_probe_expected(rnd);
      for (std::size_t i = 0; i < e2.size(); ++i) {
        std::int32_t x, y;
        std::memcpy(&x, &(*g2)[i], 4);
        std::memcpy(&y, &e2[i], 4);
        worst_ulps = std::max(worst_ulps, std::abs(double(x) - double(y)));
      }
    }
    std::printf("%s: exact inputs bitwise equal to the emulator; random inputs within %.0f ulp\n",
                std::string(a->id).c_str(), worst_ulps);
  }

  // The mutant layout must be caught on the hardware as in emulation.
  const AtomInfo* bf16 = atoms_for(target, DType::bf16).front();
  auto broken = dev->function(*module, "ft_probe_broken_mma");
  ASSERT_TRUE(broken);
  AtomProbeInputs in = make_atom_probe_inputs(*bf16, 9, true);
  auto gpu = run_atom_probe(*dev, *broken, *bf16, in);
  ASSERT_TRUE(gpu);
  std::vector<float> expect = atom_probe_expected(in);
  EXPECT_NE(0, std::memcmp(gpu->data(), expect.data(), expect.size() * sizeof(float)));
  (void)dev->unload_module(*module);
}

}  // namespace
}  // namespace ft
