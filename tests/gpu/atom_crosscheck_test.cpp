// The emulator checked against hardware: each sm_90a matrix atom (bf16, f16 and
// e4m3), fed the same operands through the same lane layout on the H200 and in
// emulation, must give the same bits (exact small-integer inputs make every
// summation order agree), and probes with a deliberately wrong layout must
// disagree on the hardware too. The fp8 conversions of templates/ft/numeric.hpp
// are checked against the hardware's cvt instructions the same way.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "generator/atoms.hpp"
#include "base/embedded_file.hpp"
#include "tests/gpu/gpu_test_support.hpp"
#include "compile/compile.hpp"
#include "generator/device_facts.hpp"
#include "device/runtimes.hpp"
#include "device/device_buffer.hpp"
#include "measure/workload/atom_probe.hpp"

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
  for (DType d : {DType::bf16, DType::f16, DType::e4m3})
    for (const AtomInfo* a : atoms_for(target, d)) atoms.push_back(a);
  ASSERT_EQ(atoms.size(), 6u) << "sm_90a: mma.sync and wgmma for bf16, f16 and e4m3";
  for (const AtomInfo* a : atoms) entries.push_back(atom_probe_entry(*a));
  entries.push_back("ft_probe_broken_mma");
  entries.push_back("ft_probe_broken_mma_e4m3");
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

  // The mutant layouts must be caught on the hardware as in emulation.
  for (const auto& [entry, atom_id] : {std::pair{"ft_probe_broken_mma", "mma_m16n8k16_f32_bf16"},
                                       std::pair{"ft_probe_broken_mma_e4m3", "mma_m16n8k32_f32_e4m3"}}) {
    const AtomInfo* base = find_atom(atom_id);
    auto broken = dev->function(*module, entry);
    ASSERT_TRUE(broken) << entry;
    AtomProbeInputs in = make_atom_probe_inputs(*base, 9, true);
    auto gpu = run_atom_probe(*dev, *broken, *base, in);
    ASSERT_TRUE(gpu);
    EXPECT_GT(fraction_differing(*gpu, atom_probe_expected(in)), 0.5) << entry << " went unnoticed on the GPU";
  }
  (void)dev->unload_module(*module);
}

// f32 values for the conversion check: every fp8 value and the f32 values either
// side of it, every midpoint between neighbours and either side (both signs),
// saturation and specials, and a strided sweep of all 2^32 f32 bit patterns.
std::vector<float> conversion_inputs() {
  std::vector<float> v;
  auto around = [&](float x) {
    for (float y : {x, std::nextafter(x, 0.0f), std::nextafter(x, INFINITY)}) {
      v.push_back(y);
      v.push_back(-y);
    }
  };
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = e4m3_to_f32(std::uint8_t(c)), hi = e4m3_to_f32(std::uint8_t(c + 1));
    around(lo);
    around((lo + hi) / 2);
  }
  for (float x : {448.0f, 464.0f, 480.0f, 1e30f, INFINITY, 0x1p-10f, 0x1p-11f, 1e-40f}) around(x);
  for (std::uint32_t nan : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xffffffffu}) v.push_back(std::bit_cast<float>(nan));
  for (std::uint64_t b = 0; b < (1ull << 32); b += 4099) v.push_back(std::bit_cast<float>(std::uint32_t(b)));
  return v;
}

// numeric.hpp's e4m3 encoder is sm_90a's cvt.rn.satfinite.e4m3x2.f32, bit for bit
// (rounding, saturation, zero signs, the NaN code), and its decoder is the
// hardware's cvt.rn.f16x2.e4m3x2 (every NaN code checked as a NaN).
TEST(AtomCrossCheck, Fp8ConversionsEqualH200Bitwise) {
  std::string why;
  auto dev = cuda_or_skip(why);
  if (!dev) GTEST_SKIP() << "skipped: no GPU (" << why << ")";
  const Target& target = *find_target("sm_90a");
  KernelSource src{"atom_probe", std::string(test::probe_sources()[0].text), {"ft_probe_cvt_e4m3"}};
  CompileOptions opt;
  opt.cache_dir = "none";
  auto co = compile(src, target, opt);
  ASSERT_TRUE(co) << co.error().describe();
  auto module = dev->load_module(co->binary);
  ASSERT_TRUE(module) << module.error().describe();
  auto fn = dev->function(*module, "ft_probe_cvt_e4m3");
  ASSERT_TRUE(fn) << fn.error().describe();

  const std::vector<float> in = conversion_inputs();
  const int n = int(in.size());
  auto d_in = DeviceBuffer::allocate(*dev, in.size() * 4);
  auto d_enc = DeviceBuffer::allocate(*dev, in.size());
  auto d_dec = DeviceBuffer::allocate(*dev, in.size() * 2);
  ASSERT_TRUE(d_in && d_enc && d_dec);
  ASSERT_TRUE(dev->copy_to_device(d_in->ptr(), in.data(), in.size() * 4));
  struct {
    std::uint64_t in, encoded, decoded;
    int n;
  } args{d_in->ptr(), d_enc->ptr(), d_dec->ptr(), n};
  ASSERT_TRUE(dev->launch(*fn, Dim3{unsigned((n + 255) / 256), 1, 1}, Dim3{256, 1, 1}, 0, {}, &args, sizeof args));
  std::vector<std::uint8_t> enc(in.size());
  std::vector<std::uint16_t> dec(in.size());
  ASSERT_TRUE(dev->copy_to_host(enc.data(), d_enc->ptr(), enc.size()));
  ASSERT_TRUE(dev->copy_to_host(dec.data(), d_dec->ptr(), dec.size() * 2));
  ASSERT_TRUE(dev->synchronize());

  int bad = 0;
  for (std::size_t i = 0; i < in.size(); ++i) {
    const std::uint8_t want = f32_to_e4m3(in[i]);
    if (enc[i] != want && bad++ < 8)
      ADD_FAILURE() << fmt::format("f32 {:#010x} ({}): the H200 encodes {:#04x}, numeric.hpp {:#04x}",
                                   std::bit_cast<std::uint32_t>(in[i]), in[i], enc[i], want);
  }
  EXPECT_EQ(bad, 0) << "of " << in.size() << " values";
  for (int c = 0; c < 256; ++c) {
    const float hw = f16_to_f32(dec[std::size_t(c)]), ours = e4m3_to_f32(std::uint8_t(c));
    if (std::isnan(ours)) EXPECT_TRUE(std::isnan(hw)) << c;
    else EXPECT_EQ(std::bit_cast<std::uint32_t>(hw), std::bit_cast<std::uint32_t>(ours)) << fmt::format("code {:#04x}", c);
  }
  std::printf("fp8 conversions: %zu f32 values encoded as cvt.rn.satfinite.e4m3x2.f32 does; 256 codes decoded as "
              "cvt.rn.f16x2.e4m3x2 does\n", in.size());
  (void)dev->unload_module(*module);
}

}  // namespace
}  // namespace ft
