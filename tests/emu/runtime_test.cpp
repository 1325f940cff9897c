// The emulator's runtime: barriers and LDS per block, barrier divergence
// reported (not hung), the wave exchange, atomics across worker threads, the
// launch checks of the emulated target, graphs.
#include <gtest/gtest.h>

#include <vector>

#include "tests/emu/emu_test_support.hpp"

namespace ft::emu::test {
namespace {

struct ProbeArgs {
  std::uint64_t out;
  int n;
  int mode;
  long long pad;
};

const std::vector<std::string> kProbeEntries = {"ft_probe_lds_rotate", "ft_probe_divergent", "ft_probe_wave_sum",
                                                "ft_probe_atomic", "ft_probe_lds_poison", "ft_probe_mbarrier_handoff",
                                                "ft_probe_mbarrier_deadlock"};

struct Buffer {
  Device& d;
  DevicePtr p;
  std::size_t n;
  Buffer(Device& dev, std::size_t count) : d(dev), n(count) {
    p = *d.alloc(count * 4);
    EXPECT_TRUE(d.memset_u32(p, 0, count));
  }
  ~Buffer() { (void)d.free(p); }
  std::vector<int> read() {
    std::vector<int> v(n);
    EXPECT_TRUE(d.copy_to_host(v.data(), p, n * 4));
    return v;
  }
};

class Runtime : public ::testing::TestWithParam<FiberSwitch> {};

TEST_P(Runtime, BarriersOrderLdsWithinEachBlock) {
  auto l = load(target("gfx942"), unit_from_file("runtime_probe.cpp", kProbeEntries), {.workers = 2, .fibers = GetParam()});
  ASSERT_TRUE(l) << l.error().describe();
  const int n = 256, gx = 3, gy = 2;
  Buffer out(*l->device, std::size_t(gx * 7 * 4 * n));
  ProbeArgs a{out.p, n, 0, 0};
  ASSERT_TRUE(l->device->launch(l->fn("ft_probe_lds_rotate"), {gx, gy, 1}, {unsigned(n), 1, 1}, n * 4, {}, &a, sizeof a));
  const auto v = out.read();
  for (int by = 0; by < gy; ++by)
    for (int bx = 0; bx < gx; ++bx) {
      const int b = bx + 7 * by;
      for (int r = 0; r < 4; ++r)
        for (int t = 0; t < n; ++t)
          ASSERT_EQ(v[std::size_t((b * 4 + r) * n + t)], b * 100000 + r * 1000 + (t + 1) % n) << "block " << b << " round " << r;
    }
}

INSTANTIATE_TEST_SUITE_P(Fibers, Runtime, ::testing::Values(FiberSwitch::fast, FiberSwitch::ucontext),
                         [](const auto& info) { return info.param == FiberSwitch::fast ? "fast" : "ucontext"; });

TEST(EmuRuntime, BarrierDivergenceIsAnErrorNotAHang) {
  auto l = load(target("gfx90a"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 256);
  ProbeArgs a{out.p, 256, 0, 0};
  auto r = l->device->launch(l->fn("ft_probe_divergent"), {2, 1, 1}, {256, 1, 1}, 0, {}, &a, sizeof a);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("barrier divergence in ft_probe_divergent"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("128 threads wait at a block barrier (0-127)"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("128 threads have exited (128-255)"), std::string::npos) << r.error().message;
}

TEST(EmuRuntime, WaveExchangeGathersTheCallersWave) {
  for (const char* name : {"gfx942", "sm_90a"}) {
    const Target& t = target(name);
    auto l = load(t, unit_from_file("runtime_probe.cpp", kProbeEntries));
    ASSERT_TRUE(l) << l.error().describe();
    const int n = 128, w = t.wave_size;
    Buffer out(*l->device, 2 * n);
    ProbeArgs a{out.p, n, 5, 0};
    ASSERT_TRUE(l->device->launch(l->fn("ft_probe_wave_sum"), {1, 1, 1}, {unsigned(n), 1, 1}, 0, {}, &a, sizeof a));
    const auto v = out.read();
    for (int tid = 0; tid < n; ++tid) {
      const int first = tid / w * w;
      int sum = 0;
      for (int l2 = first; l2 < first + w; ++l2) sum += l2 * 3 + 1;
      ASSERT_EQ(v[std::size_t(2 * tid)], sum) << name << " thread " << tid;
      ASSERT_EQ(v[std::size_t(2 * tid + 1)], first * 3 + 1) << name << " thread " << tid;
    }
  }
}

TEST(EmuRuntime, PartialWaveExchangeIsReported) {
  auto l = load(target("gfx942"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 2 * 96);
  ProbeArgs a{out.p, 96, 0, 0};
  auto r = l->device->launch(l->fn("ft_probe_wave_sum"), {1, 1, 1}, {96, 1, 1}, 0, {}, &a, sizeof a);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("partial wave"), std::string::npos) << r.error().message;
}

TEST(EmuRuntime, AtomicsAcrossWorkerThreads) {
  auto l = load(target("gfx950"), unit_from_file("runtime_probe.cpp", kProbeEntries), {.workers = 4});
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 1);
  ProbeArgs a{out.p, 256, 0, 0};
  ASSERT_TRUE(l->device->launch(l->fn("ft_probe_atomic"), {40, 1, 1}, {256, 1, 1}, 0, {}, &a, sizeof a));
  EXPECT_EQ(out.read()[0], 40 * 256);
}

TEST(EmuRuntime, MbarrierHandsOffBetweenLanes) {
  auto l = load(target("sm_90a"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  const int n = 96;
  Buffer out(*l->device, std::size_t(3 * n));
  ProbeArgs a{out.p, n, 0, 0};
  ASSERT_TRUE(l->device->launch(l->fn("ft_probe_mbarrier_handoff"), {2, 1, 1}, {unsigned(n), 1, 1}, 128, {}, &a, sizeof a));
  const auto v = out.read();
  for (int r = 0; r < 3; ++r)
    for (int t = 1; t < n; ++t) ASSERT_EQ(v[std::size_t(r * n + t)], 1000 + r) << "round " << r << " thread " << t;
}

TEST(EmuRuntime, MbarrierDeadlockIsReportedNotHung) {
  auto l = load(target("sm_90a"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 1);
  ProbeArgs a{out.p, 1, 0, 0};
  auto r = l->device->launch(l->fn("ft_probe_mbarrier_deadlock"), {1, 1, 1}, {1, 1, 1}, 64, {}, &a, sizeof a);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("mbarrier wait never completed"), std::string::npos) << r.error().message;
  EXPECT_EQ(out.read()[0], 0);
}

TEST(EmuRuntime, LdsStartsPoisoned) {
  auto l = load(target("gfx942"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 64);
  ProbeArgs a{out.p, 64, 0, 0};
  ASSERT_TRUE(l->device->launch(l->fn("ft_probe_lds_poison"), {1, 1, 1}, {64, 1, 1}, 64, {}, &a, sizeof a));
  EXPECT_EQ(out.read()[0], -1);
}

TEST(EmuRuntime, LaunchChecksOfTheEmulatedTarget) {
  auto l = load(target("gfx942"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 64);
  ProbeArgs a{out.p, 64, 0, 0};
  const FunctionHandle f = l->fn("ft_probe_lds_rotate");
  auto too_much_lds = l->device->launch(f, {1, 1, 1}, {64, 1, 1}, 65536 + 16, {}, &a, sizeof a);
  ASSERT_FALSE(too_much_lds);
  EXPECT_NE(too_much_lds.error().describe().find("LDS use 65552 bytes exceeds 65536"), std::string::npos)
      << too_much_lds.error().describe();
  auto bad_args = l->device->launch(f, {1, 1, 1}, {64, 1, 1}, 0, {}, &a, sizeof a - 8);
  ASSERT_FALSE(bad_args);
  EXPECT_NE(bad_args.error().message.find("argument struct of 16 bytes, the kernel takes 24"), std::string::npos)
      << bad_args.error().message;
  // A longer struct (fields appended since the kernel was built) is read for its first bytes, as on a GPU.
  Buffer rotated(*l->device, 7 * 4 * 64 * 4);
  struct Longer {
    ProbeArgs a;
    long long appended;
  } longer{{rotated.p, 64, 0, 0}, -1};
  EXPECT_TRUE(l->device->launch(f, {1, 1, 1}, {64, 1, 1}, 64 * 4, {}, &longer, sizeof longer));
  auto over_bound = l->device->launch(l->fn("ft_probe_atomic"), {1, 1, 1}, {512, 1, 1}, 0, {}, &a, sizeof a);
  ASSERT_FALSE(over_bound);
  EXPECT_NE(over_bound.error().message.find("exceeds the kernel's launch bound 256"), std::string::npos)
      << over_bound.error().message;
  EXPECT_FALSE(l->device->function(l->module, "ft_no_such_kernel"));
}

TEST(EmuRuntime, NvidiaSharedMemoryNeedsTheOptIn) {
  auto l = load(target("sm_90a"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 4 * 64);
  ProbeArgs a{out.p, 64, 0, 0};
  const FunctionHandle f = l->fn("ft_probe_lds_rotate");
  EXPECT_FALSE(l->device->launch(f, {1, 1, 1}, {64, 1, 1}, 64 * 1024, {}, &a, sizeof a));
  ASSERT_TRUE(l->device->set_dynamic_shared(f, 64 * 1024));
  EXPECT_TRUE(l->device->launch(f, {1, 1, 1}, {64, 1, 1}, 64 * 1024, {}, &a, sizeof a));
  EXPECT_FALSE(l->device->set_dynamic_shared(f, 232448 + 1024));
}

TEST(EmuRuntime, CapturedGraphReplaysTheLaunches) {
  auto l = load(target("gfx90a"), unit_from_file("runtime_probe.cpp", kProbeEntries));
  ASSERT_TRUE(l) << l.error().describe();
  Buffer out(*l->device, 1);
  ProbeArgs a{out.p, 256, 0, 0};
  auto s = l->device->create_stream();
  ASSERT_TRUE(s);
  ASSERT_TRUE(l->device->begin_capture(*s));
  ASSERT_TRUE(l->device->launch(l->fn("ft_probe_atomic"), {2, 1, 1}, {256, 1, 1}, 0, *s, &a, sizeof a));
  auto g = l->device->end_capture(*s);
  ASSERT_TRUE(g);
  EXPECT_EQ(out.read()[0], 0);  // captured, not run
  ASSERT_TRUE(l->device->launch_graph(*g, *s));
  ASSERT_TRUE(l->device->launch_graph(*g, *s));
  EXPECT_EQ(out.read()[0], 2 * 2 * 256);
}

TEST(EmuCompile, CompileErrorsCarryTheCompilersMessage) {
  KernelSource bad{"ft_bad_unit", "#include \"ft/kernels.hpp\"\nFT_KERNEL(64, ft_bad)(int x) { undeclared_name(x); }\n", {"ft_bad"}};
  auto r = compile_emulated(bad, target("gfx942"), compile_options());
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::compile);
  EXPECT_NE(r.error().message.find("undeclared_name"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().context.find("gfx942: ft_bad_unit (emulated)"), std::string::npos);
}

TEST(EmuCompile, SecondCompileComesFromTheCache) {
  const KernelSource src = unit_from_file("runtime_probe.cpp", kProbeEntries);
  auto first = compile_emulated(src, target("gfx942"), compile_options());
  ASSERT_TRUE(first) << first.error().describe();
  auto second = compile_emulated(src, target("gfx942"), compile_options());
  ASSERT_TRUE(second);
  EXPECT_TRUE(second->from_cache);
  EXPECT_EQ(first->cache_key, second->cache_key);
  auto other_target = compile_emulated(src, target("gfx950"), compile_options());
  ASSERT_TRUE(other_target);
  EXPECT_NE(other_target->cache_key, first->cache_key);
}

TEST(EmuCompile, AtomOfAnotherWaveSizeDoesNotCompile) {
  KernelSource src{"ft_wrong_vendor",
                   "#include \"ft/kernels.hpp\"\n"
                   "FT_KERNEL(64, ft_wrong)(float* c) { ft::u16 a[4] = {}, b[4] = {}; float acc[4] = {};\n"
                   "  ft::atom::mfma_f32_16x16x16_bf16::mma(acc, a, b); c[0] = acc[0]; }\n",
                   {"ft_wrong"}};
  auto r = compile_emulated(src, target("sm_90a"), compile_options());
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("another vendor's wave size"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace ft::emu::test
