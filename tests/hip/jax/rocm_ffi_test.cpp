// The Python package's JAX ROCm FFI target on the HIP test double: the
// handlers jax_handlers() gives jax.ffi.register_ffi_target for platform
// "ROCM" (python/src/jax_ffi.cpp's FlytuneMoeLayerRocm and
// FlytuneArrangeWeightsRocm, built from the package's own sources against
// jaxlib's FFI headers), called through XLA's FFI C ABI with a call frame of
// jax/xla_ffi_host.hpp: the args' buffers with their dtypes and dims, the
// attributes, the rets, and a stream of the double from XLA_FFI_Stream_Get.
// The export is a real gfx942 one (`flytune search --target gfx942 --device
// hip:0` on the double, then `flytune export`), so the handler's runtime loads
// its code objects with hipModuleLoadData and the double checks each launch
// against their AMDGPU metadata before running it on the emulator; y is held
// to the CPU reference. No ROCm jaxlib exists here: JAX itself never calls
// this handler in CI (docs/AMD.md, "The JAX ROCm target on the double").
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "device/device_buffer.hpp"
#include "device/hip_device.hpp"
#include "generator/problem.hpp"
#include "measure/workload/compare.hpp"
#include "measure/workload/reference.hpp"
#include "measure/workload/workload.hpp"
#include "python/src/export.hpp"
#include "python/src/jax_ffi.hpp"
#include "tests/hip/hip_search_support.hpp"
#include "tests/hip/jax/xla_ffi_host.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

namespace xla = test::xla;

constexpr const char* kSpace = "small;atom=mfma_f32_16x16x16_bf16;tile_m=32;split_k=1;layout=shuffled";  // one variant per stage, reading shuffled weights
constexpr int kTokens = 5;                       // under the export's one bucket (8)
constexpr std::uint16_t kPoison = 0x7fc0;        // a bf16 NaN: y elements no kernel wrote fail the comparison

XLA_FFI_Handler* rocm_handler(const std::string& name) {
  for (const py::JaxHandler& h : py::jax_handlers())
    if (h.name == name && std::string(h.platform) == "ROCM") return reinterpret_cast<XLA_FFI_Handler*>(h.function);
  return nullptr;
}

// The tiny gfx942 export of a search on the double's hip:0 (half a minute on
// the emulator) and why there is none. ctest runs each test in a process of
// its own, so the first one keeps it in the build tree for the others, marked
// with the flytune binary and the space that made it and remade when either changes.
struct TinyExport {
  std::string path, error;
};

std::string made_by() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto size = fs::file_size(FLYTUNE_BIN, ec);
  const auto time = fs::last_write_time(FLYTUNE_BIN, ec).time_since_epoch().count();
  return std::string(FLYTUNE_BIN) + " " + std::to_string(size) + " " + std::to_string(time) + " " + kSpace + "\n";
}

TinyExport make_tiny_export() {
  namespace fs = std::filesystem;
  const fs::path kept = fs::path(FT_HIP_TEST_CACHE) / "jax-rocm-export";
  const std::string stamp = made_by();
  const auto current = [&] { return test::read_bytes((kept / "made-by").string()) == stamp; };
  if (current()) return {(kept / "export").string(), ""};
  std::error_code ec;
  fs::create_directories(FT_HIP_TEST_CACHE, ec);
  std::string fresh = (fs::path(FT_HIP_TEST_CACHE) / "jax-rocm-export-XXXXXX").string();
  if (!mkdtemp(fresh.data())) return {"", "cannot make a folder in " FT_HIP_TEST_CACHE};
  const std::string db = fresh + "/amd.db";
  auto s = test::run_flytune({"search", "--target", "gfx942", "--device", "hip:0", "--problem", "tiny", "--space", kSpace,
                              "--tokens", "8", "--seed", "3", "--no-baseline", "--db", db});
  auto x = s.exit_code == 0 ? test::run_flytune({"export", "--db", db, "--out", fresh + "/export", "--no-check"}) : s;
  if (s.exit_code != 0 || x.exit_code != 0) {
    fs::remove_all(fresh, ec);
    return {"", x.output};
  }
  test::write_bytes(fresh + "/made-by", stamp);  // last: a folder with it is complete
  if (!current()) fs::remove_all(kept, ec);  // another binary's (a concurrent test's current one stays)
  fs::rename(fresh, kept, ec);  // fails where a concurrent test's is there already: that one serves
  if (ec) fs::remove_all(fresh, ec);
  return current() ? TinyExport{(kept / "export").string(), ""} : TinyExport{"", "no current export in " + kept.string()};
}

const TinyExport& tiny_export() {
  static const TinyExport made = make_tiny_export();
  return made;
}

// One layer's buffers on the double's hip:0, from a seeded workload, and the
// call frame of flytune_moe_layer over them.
class RocmFfi : public ::testing::Test {
 protected:
  void SetUp() override {
    test::skip_unless_buildable("gfx942");
    if (IsSkipped() || HasFatalFailure()) return;
    const TinyExport& made = tiny_export();
    ASSERT_EQ(made.error, "") << "search + export on the double failed";
    try {
      export_ = py::Export::open(made.path, "hip:0");
    } catch (const py::Error& e) {
      FAIL() << "flytune.load on hip:0: " << e.what();
    }
    ASSERT_EQ(export_->target(), "gfx942");
    ASSERT_EQ(export_->problems().size(), 1u);
    problem_ = export_->problems().front().key;
    auto d = open_hip_device(0);
    ASSERT_TRUE(d) << d.error().describe();
    device_ = std::move(*d);
    auto s = device_->create_stream();
    ASSERT_TRUE(s) << s.error().describe();
    stream_ = *s;
    auto p = problem_from_preset("tiny");
    ASSERT_TRUE(p) << p.error().describe();
    const py::ProblemInfo& served = export_->problems().front();
    ASSERT_EQ(std::tuple(served.experts, served.hidden, served.inter, served.topk, served.dtype),
              std::tuple(p->experts, p->hidden, p->inter, p->topk, std::string("bf16")));
    auto w = make_workload(*p, kTokens, {.seed = 11});
    ASSERT_TRUE(w) << w.error().describe();
    work_ = std::move(*w);
    upload();
  }

  void TearDown() override {
    buffers_.clear();
    if (device_ && stream_.p) (void)device_->destroy_stream(stream_);
  }

  DevicePtr buffer(const void* host, std::size_t bytes) {
    auto b = DeviceBuffer::allocate(*device_, bytes);
    EXPECT_TRUE(b) << b.error().describe();
    if (!b) return 0;
    if (host) {
      EXPECT_TRUE(device_->copy_to_device(b->ptr(), host, bytes));
    }
    buffers_.push_back(std::move(*b));
    return buffers_.back().ptr();
  }
  template <class T>
  xla::Buffer tensor(XLA_FFI_DataType dtype, const std::vector<T>& host, std::vector<std::int64_t> dims) {
    return {dtype, reinterpret_cast<void*>(buffer(host.data(), host.size() * sizeof(T))), std::move(dims)};
  }

  // x, the routing and the weights as the wrapper passes them; the arranged
  // copies the plan reads, made by flytune_arrange_weights on the same stream.
  void upload() {
    const Problem& p = work_.problem;
    const std::int64_t T = kTokens, H = p.hidden, I = p.inter, E = p.experts, k = p.topk;
    const py::PlanInfo plan = export_->plan_info(problem_, kTokens);
    ASSERT_TRUE(plan.w1_shuffled && plan.w2_shuffled) << "the layout=shuffled variants read both arranged copies";
    x_ = tensor(XLA_FFI_DataType_BF16, work_.x, {T, H});
    ids_ = tensor(XLA_FFI_DataType_S32, work_.topk_ids, {T, k});
    weights_ = tensor(XLA_FFI_DataType_F32, work_.topk_weights, {T, k});
    w1_ = tensor(XLA_FFI_DataType_BF16, work_.w1, {E, 2 * I, H});
    w2_ = tensor(XLA_FFI_DataType_BF16, work_.w2, {E, H, I});
    const std::pair<bool, const xla::Buffer*> wanted[4] = {
        {plan.w1_shuffled, &w1_}, {plan.w2_shuffled, &w2_}, {plan.w1_tiled, &w1_}, {plan.w2_tiled, &w2_}};
    for (int i = 0; i < 4; ++i) {
      copies_[i] = {XLA_FFI_DataType_BF16, nullptr, {0}};
      if (wanted[i].first) copies_[i] = arranged(*wanted[i].second, i < 2 ? FT_WEIGHT_LAYOUT_SHUFFLED : FT_WEIGHT_LAYOUT_TILED);
    }
    std::vector<std::uint16_t> poisoned(work_.x.size(), kPoison);
    y_ = tensor(XLA_FFI_DataType_BF16, poisoned, {T, H});
    workspace_ = {XLA_FFI_DataType_U8, reinterpret_cast<void*>(buffer(nullptr, plan.workspace.total)),
                  {std::int64_t(plan.workspace.total)}};
  }

  xla::Buffer arranged(const xla::Buffer& src, int layout) {
    const std::int64_t rows = src.dims[0] * src.dims[1], cols = src.dims[2];
    xla::Buffer dst{src.dtype, reinterpret_cast<void*>(buffer(nullptr, rows * cols * 2)), src.dims};
    xla::Call c;
    c.args = {src};
    c.rets = {dst};
    c.attrs = {{"export", export_->key()}, {"layout", layout}, {"rows", std::int32_t(rows)}, {"cols", std::int32_t(cols)}};
    c.stream = stream_.p;
    const xla::Outcome out = xla::call(rocm_handler("flytune_arrange_weights"), c);
    EXPECT_TRUE(out.ok) << out.message;
    return dst;
  }

  // flytune_moe_layer's call frame (bind_moe's order), on the stream of hip:0.
  xla::Call layer_call() const {
    const xla::Buffer none{XLA_FFI_DataType_F32, nullptr, {0}};  // the scales of a 16-bit layer
    xla::Call c;
    c.args = {x_, ids_, weights_, w1_, w2_, copies_[0], copies_[1], copies_[2], copies_[3], none, none, none, none};
    c.rets = {y_, workspace_};
    c.attrs = {{"export", export_->key()}, {"problem", problem_}};
    c.stream = stream_.p;
    c.ordinal = 0;
    return c;
  }

  std::vector<std::uint16_t> y() {
    std::vector<std::uint16_t> out(work_.x.size());
    EXPECT_TRUE(device_->synchronize(stream_));
    EXPECT_TRUE(device_->copy_to_host(out.data(), DevicePtr(reinterpret_cast<std::uintptr_t>(y_.data)), out.size() * 2));
    return out;
  }

  std::shared_ptr<py::Export> export_;
  std::string problem_;
  std::unique_ptr<Device> device_;
  StreamHandle stream_;
  Workload work_;
  std::vector<DeviceBuffer> buffers_;
  xla::Buffer x_, ids_, weights_, w1_, w2_, copies_[4], y_, workspace_;
  test::HipDoubleEnv env_{kSpace};
};

TEST_F(RocmFfi, RunsATinyLayerOnTheDouble) {
  XLA_FFI_Handler* handler = rocm_handler("flytune_moe_layer");
  ASSERT_NE(handler, nullptr);
  const xla::Outcome out = xla::call(handler, layer_call());
  ASSERT_TRUE(out.ok) << out.message;
  EXPECT_EQ(xla::live_errors(), 0);
  const std::vector<std::uint16_t> got = y();
  const ReferenceOutput ref = reference_layer(work_);
  const Comparison c = compare_output(got, ref.y, DType::bf16);
  EXPECT_TRUE(c.passed) << c.summary(work_.problem.hidden) << " (jaxlib " FT_HIP_JAXLIB_VERSION ")";
}

// The copies flytune_arrange_weights made are what the layer reads: the plain
// weights passed in their place miss the reference.
TEST_F(RocmFfi, PlainWeightsInPlaceOfTheShuffledCopiesMissTheReference) {
  xla::Call c = layer_call();
  c.args[5] = w1_, c.args[6] = w2_;
  const xla::Outcome out = xla::call(rocm_handler("flytune_moe_layer"), c);
  ASSERT_TRUE(out.ok) << out.message;
  const Comparison cmp = compare_output(y(), reference_layer(work_).y, DType::bf16);
  EXPECT_FALSE(cmp.passed) << cmp.summary(work_.problem.hidden);
  EXPECT_GT(cmp.rel_l2, 0.1) << cmp.summary(work_.problem.hidden);
}

// A call frame the handler must refuse with one line through the FFI error
// API, launching nothing (y stays poisoned).
struct Mutant {
  const char* name;
  std::function<void(xla::Call&)> mutate;
  XLA_FFI_Error_Code code;
  const char* says;
};

void PrintTo(const Mutant& m, std::ostream* os) { *os << m.name; }

int g_foreign_stream = 0;  // an address that is no stream of the double's

const Mutant kMutants[] = {
    {"x_as_float16", [](xla::Call& c) { c.args[0].dtype = XLA_FFI_DataType_F16; }, XLA_FFI_Error_Code_INVALID_ARGUMENT,
     "takes x and y of bf16"},
    {"y_as_float32", [](xla::Call& c) { c.rets[0].dtype = XLA_FFI_DataType_F32; }, XLA_FFI_Error_Code_INVALID_ARGUMENT,
     "takes x and y of bf16"},
    {"topk_ids_one_slot_short", [](xla::Call& c) { c.args[1].dims = {kTokens, 1}; }, XLA_FFI_Error_Code_INVALID_ARGUMENT,
     "do not fit"},
    {"x_of_half_the_hidden_size", [](xla::Call& c) { c.args[0].dims = {2 * kTokens, c.args[0].dims[1] / 2}; },
     XLA_FFI_Error_Code_INVALID_ARGUMENT, "do not fit"},
    {"workspace_one_byte_short", [](xla::Call& c) { c.rets[1].dims[0] -= 1; }, XLA_FFI_Error_Code_INVALID_ARGUMENT,
     "the plan needs"},
    {"a_stream_not_of_the_double", [](xla::Call& c) { c.stream = &g_foreign_stream; }, XLA_FFI_Error_Code_UNAVAILABLE,
     "not a stream of the flytune HIP double"},
    {"an_ordinal_the_export_is_not_open_on", [](xla::Call& c) { c.ordinal = 1; }, XLA_FFI_Error_Code_UNAVAILABLE,
     "is not open on hip:1"},
    {"an_export_never_loaded", [](xla::Call& c) { c.attrs[0].value = std::string("/nowhere#1"); },
     XLA_FFI_Error_Code_INVALID_ARGUMENT, "no export '/nowhere#1' is loaded"},
};

class RocmFfiMutant : public RocmFfi, public ::testing::WithParamInterface<Mutant> {};

TEST_P(RocmFfiMutant, IsRefusedWithOneLineAndLaunchesNothing) {
  xla::Call c = layer_call();
  GetParam().mutate(c);
  const xla::Outcome out = xla::call(rocm_handler("flytune_moe_layer"), c);
  ASSERT_FALSE(out.ok);
  EXPECT_EQ(out.code, GetParam().code) << out.message;
  EXPECT_NE(out.message.find(GetParam().says), std::string::npos) << out.message;
  EXPECT_EQ(out.message.rfind("flytune: moe_layer: ", 0), 0u) << out.message;
  EXPECT_EQ(out.message.find('\n'), std::string::npos) << out.message;
  EXPECT_EQ(xla::live_errors(), 0);
  const std::vector<std::uint16_t> got = y();
  for (std::size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], kPoison) << "y[" << i << "] was written";
}

INSTANTIATE_TEST_SUITE_P(CallFrames, RocmFfiMutant, ::testing::ValuesIn(kMutants),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace ft
