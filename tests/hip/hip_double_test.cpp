// flytune's HIP path (device/hip_device.cpp, flytune devices) on the HIP test
// double: FLYTUNE_LIBHIP names libflytune_hip_double.so, whose GPUs are an
// MI300X-like gfx942 and an MI355X-like gfx950 on the CPU emulator. The
// support unit is compiled for gfx942 by the real AMD toolchain; the double
// reads its AMDGPU metadata, runs the emulator's build of the same unit, and
// refuses launches that disagree with the metadata (the mutants below).
#include <dlfcn.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compile/analyze/amdgpu_metadata.hpp"
#include "compile/compile.hpp"
#include "emulate/emu_device.hpp"
#include "generator/space.hpp"
#include "device/hip_device.hpp"
#include "generator/emitter.hpp"
#include "generator/target.hpp"
#include "layer/device_structs.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"

namespace ft {
namespace {

using test::ScopedEnv;


const Target& gfx942() { return *find_target("gfx942"); }

// The gfx942 support unit as the real toolchain builds it (cached between runs).
const CodeObject& support_object() {
  static CodeObject object = [] {
    CompileOptions options;
    options.cache_dir = FT_HIP_TEST_CACHE;
    auto r = compile(emit_support(gfx942(), DType::bf16), gfx942(), options);
    if (!r) return CodeObject{};
    return std::move(*r);
  }();
  return object;
}

class HipDouble : public ::testing::Test {
 protected:
  void SetUp() override {
    if (support_object().binary.empty()) GTEST_SKIP() << "skipped: no AMD toolchain builds gfx942 here";
    auto d = open_hip_device(0);
    ASSERT_TRUE(d) << d.error().describe();
    device_ = std::move(*d);
  }


 public:
  // Loads `image` and launches the fill kernel with `change` applied to the launch.
  struct Launch {
    std::string kernel = fill_entry(gfx942());
    Dim3 grid{4, 1, 1}, block{kFillThreads, 1, 1};
    int lds = 0;
    std::size_t args_size = sizeof(FillArgs);
  };
  Status fill(const std::vector<std::byte>& image, const Launch& l, std::vector<std::uint16_t>* out = nullptr) {
    const std::size_t count = 4 * kFillThreads;
    ModuleHandle m = FT_TRY(device_->load_module(image));
    FunctionHandle f = FT_TRY(device_->function(m, l.kernel));
    DevicePtr dst = FT_TRY(device_->alloc(count * 2));
    FT_CHECK(device_->memset_u32(dst, 0, count / 2));
    FillArgs args{};
    args.dst = reinterpret_cast<u16*>(std::uintptr_t(dst));
    args.count = count;
    args.seed = 7;
    args.scale = 1.0f;
    FT_CHECK(device_->launch(f, l.grid, l.block, l.lds, {}, &args, l.args_size));
    if (out) {
      out->resize(count);
      FT_CHECK(device_->copy_to_host(out->data(), dst, count * 2));
    }
    FT_CHECK(device_->free(dst));
    return device_->unload_module(m);
  }

  ScopedEnv lib_{"FLYTUNE_LIBHIP", FT_HIP_DOUBLE};
  std::unique_ptr<Device> device_;
};

TEST_F(HipDouble, ReportsTheEmulatedMi300x) {
  const DeviceInfo& d = device_->info();
  EXPECT_EQ(d.runtime, "hip");
  EXPECT_EQ(d.arch, "gfx942");
  EXPECT_EQ(d.compute_units, 304);
  EXPECT_EQ(d.max_shared_per_block, 65536);
  EXPECT_NE(d.name.find("emulated"), std::string::npos) << d.name;
  auto second = open_hip_device(1);
  ASSERT_TRUE(second) << second.error().describe();
  EXPECT_EQ((*second)->info().arch, "gfx950");
  EXPECT_EQ((*second)->info().max_shared_per_block, 163840);
}

TEST_F(HipDouble, RunsTheRealCodeObjectsKernelOnTheEmulator) {
  std::vector<std::uint16_t> out;
  ASSERT_TRUE(fill(support_object().binary, Launch{}, &out)) << fill(support_object().binary, Launch{}).error().describe();
  std::size_t written = 0;
  for (std::uint16_t v : out) written += v != 0;
  EXPECT_GT(written, out.size() * 9 / 10);
}

TEST_F(HipDouble, EventsTimeEmulatedWork) {
  EventHandle a = *device_->create_event(), b = *device_->create_event();
  ASSERT_TRUE(device_->record(a));
  ASSERT_TRUE(fill(support_object().binary, Launch{}));
  ASSERT_TRUE(device_->record(b));
  auto ms = device_->elapsed_ms(a, b);
  ASSERT_TRUE(ms) << ms.error().describe();
  EXPECT_GT(*ms, 0.0f);
}

// The double's events hold the timing protocol to what a real GPU needs:
// the stop event recorded after the start, and completed (a synchronize
// since its record) before its time is read. HipDevice::elapsed_ms
// synchronizes on the stop event; the raw calls show the refusal.
TEST_F(HipDouble, EventsRefuseSwappedOrUnfinishedReads) {
  EventHandle a = *device_->create_event(), b = *device_->create_event();
  ASSERT_TRUE(device_->record(a));
  ASSERT_TRUE(device_->record(b));
  auto swapped = device_->elapsed_ms(b, a);
  ASSERT_FALSE(swapped);
  EXPECT_NE(swapped.error().describe().find("the events are swapped"), std::string::npos) << swapped.error().describe();
  EXPECT_TRUE(device_->elapsed_ms(a, b));

  void* lib = dlopen(FT_HIP_DOUBLE, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(lib, nullptr) << "the double is loaded by the device";
  auto record = reinterpret_cast<int (*)(void*, void*)>(dlsym(lib, "hipEventRecord"));
  auto elapsed = reinterpret_cast<int (*)(float*, void*, void*)>(dlsym(lib, "hipEventElapsedTime"));
  auto sync = reinterpret_cast<int (*)(void*)>(dlsym(lib, "hipEventSynchronize"));
  ASSERT_TRUE(record && elapsed && sync);
  ASSERT_EQ(record(b.p, nullptr), 0);
  float ms = 0;
  EXPECT_EQ(elapsed(&ms, a.p, b.p), 600 /* hipErrorNotReady */) << "read before the stop event completed";
  ASSERT_EQ(sync(b.p), 0);
  EXPECT_EQ(elapsed(&ms, a.p, b.p), 0);
  EXPECT_GE(ms, 0.0f);
  dlclose(lib);
  EXPECT_TRUE(device_->destroy_event(a));
  EXPECT_TRUE(device_->destroy_event(b));
}

TEST_F(HipDouble, RefusesACodeObjectOfAnotherTarget) {
  ASSERT_TRUE(device_);
  auto other = open_hip_device(1);  // gfx950
  ASSERT_TRUE(other);
  auto m = (*other)->load_module(support_object().binary);
  ASSERT_FALSE(m);
  EXPECT_NE(m.error().describe().find("a code object for gfx942"), std::string::npos) << m.error().describe();
}

// The metadata's first explicit argument moved from offset 0 to 8: the msgpack
// fixint 0 after the fixstr key ".offset" becomes 8 (same length).
std::vector<std::byte> offset_off_by_8(std::vector<std::byte> image) {
  const std::string key = "\xa7.offset";
  std::size_t patched = 0;
  for (std::size_t i = 0; i + key.size() < image.size(); ++i)
    if (std::memcmp(image.data() + i, key.data(), key.size()) == 0 && image[i + key.size()] == std::byte{0}) {
      image[i + key.size()] = std::byte{8};
      ++patched;
    }
  EXPECT_GT(patched, 0u);
  return image;
}

struct Mutant {
  const char* name;
  std::function<void(HipDouble::Launch&)> change;
  bool patch_offset;
  const char* expected;  // in the error line
};

TEST_F(HipDouble, MutantsAreRefusedWithTheReason) {
  const std::vector<Mutant> mutants{
      {"kernarg offset off by 8", [](HipDouble::Launch&) {}, true, "argument by_value [8, +"},
      {"kernarg segment one word short", [](HipDouble::Launch& l) { l.args_size -= 4; }, false,
       "explicit kernarg segment is"},
      {"LDS over the figure", [](HipDouble::Launch& l) { l.lds = 65536 + 16; }, false, "bytes of LDS"},
      {"a kernel the code object lacks", [](HipDouble::Launch& l) { l.kernel = "ft_gfx942_no_such_kernel"; }, false,
       "no kernel named 'ft_gfx942_no_such_kernel'"},
      {"more threads than the maximum workgroup size", [](HipDouble::Launch& l) { l.block = {kFillThreads * 4, 1, 1}; },
       false, "maximum workgroup size is"},
  };
  for (const Mutant& m : mutants) {
    SCOPED_TRACE(m.name);
    Launch l;
    m.change(l);
    const auto image = m.patch_offset ? offset_off_by_8(support_object().binary) : support_object().binary;
    const Status s = fill(image, l);
    ASSERT_FALSE(s) << "the double ran the mutant";
    EXPECT_NE(s.error().describe().find(m.expected), std::string::npos) << s.error().describe();
  }
  // The unmutated launch still runs: the mutants failed for their own reason.
  EXPECT_TRUE(fill(support_object().binary, Launch{}));
}

TEST(HipDoubleCli, DevicesListsTheEmulatedGpus) {
  ScopedEnv lib("FLYTUNE_LIBHIP", FT_HIP_DOUBLE);
  auto r = test::run_flytune({"devices", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.output;
  ASSERT_GE(j["devices"].size(), 2u) << r.output;
  const auto& d0 = j["devices"][0];
  EXPECT_EQ(d0["arch"], "gfx942") << d0.dump();
  EXPECT_EQ(d0["compute_units"], 304) << d0.dump();
  EXPECT_NE(d0["name"].get<std::string>().find("emulated"), std::string::npos) << d0.dump();
  EXPECT_EQ(j["devices"][1]["arch"], "gfx950") << j.dump();
  auto text = test::run_flytune({"devices"});
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("hip:0"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("MI300X (emulated"), std::string::npos) << text.output;
}

}  // namespace
}  // namespace ft
