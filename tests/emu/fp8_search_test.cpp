// flytune search --emulate on fp8 problems (sm_90a, its wgmma and mma.sync variants): the real
// binary compiles the e4m3 support unit and variants, LayerBench verifies every
// stage against the fp8 reference kernels on poisoned outputs, times them and
// pairs the layer, for every scale mode (block128 also with producer
// warpgroups only, whose consumers promote); the export re-checks its layers
// through the runtime on the emulator, and check-export runs them again at
// token counts of its own. Then the C API itself on that export: the plan's
// shape and scale counts, a null scale refused with its name (static mode: its
// inter_scale too), and the mutant: W2's scales doubled give a layer that no
// longer matches the reference. Static mode (the caller's static x and
// intermediate scales, stage 1 quantising on store with the latter): the
// search calibrates the intermediate's scale on each batch, check-export on its own.
#include <cmath>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "emulate/emu_device.hpp"
#include "flytune_runtime.h"
#include "measure/workload/workload.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using nlohmann::json;

json summary_json(const std::string& output) {
  const auto at = output.find("\n{") != std::string::npos ? output.find("\n{") + 1 : output.find('{');
  if (at == std::string::npos) return json();
  return json::parse(output.substr(at), nullptr, false);
}

// The export (a search on the emulator ships host libraries) opened through the C API on an emulated sm_90a.
ft_runtime* open_export(const std::string& dir) {
  auto opener = []() -> Result<std::unique_ptr<Device>> {
    auto d = FT_TRY(emu::EmuDevice::create(*lookup_target("sm_90a").value()));
    return std::unique_ptr<Device>(std::move(d));
  };
  auto rt = rt::Runtime::open(dir, opener);
  return rt ? rt::adopt_runtime(std::move(*rt)) : nullptr;
}

struct Mem {
  ft_runtime* rt;
  std::vector<void*> ptrs;
  ~Mem() {
    for (void* p : ptrs) ft_runtime_free(rt, p);
  }
  void* get(std::size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(ft_runtime_alloc(rt, bytes, &p), FT_OK) << ft_runtime_last_error(rt);
    ptrs.push_back(p);
    return p;
  }
};

std::vector<float> bf16_values(ft_runtime* rt, const void* p, std::size_t n) {
  std::vector<std::uint16_t> bits(n);
  EXPECT_EQ(ft_runtime_download(rt, bits.data(), p, n * 2), FT_OK);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t w = std::uint32_t(bits[i]) << 16;
    std::memcpy(&out[i], &w, 4);
  }
  return out;
}

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, r = 0;
  for (std::size_t i = 0; i < a.size(); ++i) e += (a[i] - b[i]) * double(a[i] - b[i]), r += double(b[i]) * b[i];
  return std::sqrt(e / std::max(r, 1e-30));
}

// The C API on an fp8 export: what a caller learns from the plan, and that the
// layer reads the scales it is given.
void check_c_api(const std::string& dir, const std::string& mode) {
  ft_runtime* rt = open_export(dir);
  ASSERT_NE(rt, nullptr);
  const std::unique_ptr<ft_runtime, void (*)(ft_runtime*)> guard(rt, ft_runtime_close);
  ASSERT_EQ(ft_runtime_problem_count(rt), 1);
  const std::string key = ft_runtime_problem_key(rt, 0);
  EXPECT_NE(key.find("e4m3:" + mode), std::string::npos) << key;
  const int T = 5;
  ft_plan* plan = nullptr;
  ASSERT_EQ(ft_runtime_select(rt, key.c_str(), T, &plan), FT_OK) << ft_runtime_last_error(rt);
  const std::unique_ptr<ft_plan, void (*)(ft_plan*)> pguard(plan, ft_plan_free);
  ft_problem_shape s{};
  ft_plan_shape(plan, &s);
  EXPECT_EQ(s.element_bytes, 1);
  EXPECT_STREQ(s.dtype, "e4m3");
  const std::size_t E = s.experts, H = s.hidden, I = s.inter, k = s.topk;
  const int want_mode = mode == "per-tensor" ? FT_SCALES_PER_TENSOR
                        : mode == "per-token"  ? FT_SCALES_PER_TOKEN
                        : mode == "static"     ? FT_SCALES_STATIC
                                               : FT_SCALES_BLOCK128;
  EXPECT_EQ(ft_plan_scales(plan), want_mode);
  const bool tensor = want_mode == FT_SCALES_PER_TENSOR || want_mode == FT_SCALES_STATIC;
  const std::size_t n1 = ft_plan_scale_count(plan, FT_SCALE_W1), n2 = ft_plan_scale_count(plan, FT_SCALE_W2);
  const std::size_t want1 = tensor ? E : want_mode == FT_SCALES_PER_TOKEN ? E * 2 * I : E * (2 * I / 128) * (H / 128);
  const std::size_t want2 = tensor ? E : want_mode == FT_SCALES_PER_TOKEN ? E * H : E * (H / 128) * (I / 128);
  EXPECT_EQ(n1, want1);
  EXPECT_EQ(n2, want2);
  EXPECT_EQ(ft_plan_scale_count(plan, FT_SCALE_X), tensor ? 1u : 0u);
  EXPECT_EQ(ft_plan_scale_count(plan, FT_SCALE_INTER), want_mode == FT_SCALES_STATIC ? 1u : 0u);
  EXPECT_EQ(ft_plan_scale_count(plan, 7), 0u);
  std::int64_t dims[3] = {-1, -1, -1};
  const int rank = ft_plan_scale_shape(plan, FT_SCALE_W2, dims);
  EXPECT_EQ(rank, tensor ? 1 : want_mode == FT_SCALES_PER_TOKEN ? 2 : 3);
  EXPECT_EQ(dims[0], std::int64_t(E));
  if (want_mode == FT_SCALES_PER_TOKEN) { EXPECT_EQ(dims[1], std::int64_t(H)); }
  if (want_mode == FT_SCALES_BLOCK128) { EXPECT_EQ(dims[2], std::int64_t(I / 128)); }
  EXPECT_EQ(ft_plan_scale_shape(plan, FT_SCALE_X, dims), tensor ? 1 : 0);

  Mem m{rt, {}};
  ft_layer_buffers b{};
  b.x = m.get(T * H * 2);
  b.w1 = m.get(E * 2 * I * H);
  b.w2 = m.get(E * H * I);
  b.w1_scales = static_cast<float*>(m.get(n1 * 4));
  b.w2_scales = static_cast<float*>(m.get(n2 * 4));
  if (tensor) {
    const float xs = fp8_x_scale(Elem::e4m3);
    b.x_scale = static_cast<float*>(m.get(4));
    ASSERT_EQ(ft_runtime_upload(rt, const_cast<float*>(b.x_scale), &xs, 4), FT_OK);
  }
  std::vector<std::int32_t> ids(T * k);
  std::vector<float> weights(T * k, 0.5f);
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = std::int32_t((i * 3 + i / k) % E);
  void* dids = m.get(ids.size() * 4);
  void* dw = m.get(weights.size() * 4);
  ASSERT_EQ(ft_runtime_upload(rt, dids, ids.data(), ids.size() * 4), FT_OK);
  ASSERT_EQ(ft_runtime_upload(rt, dw, weights.data(), weights.size() * 4), FT_OK);
  b.topk_ids = static_cast<const std::int32_t*>(dids);
  b.topk_weights = static_cast<const float*>(dw);
  b.y = m.get(T * H * 2);
  void* y_ref = m.get(T * H * 2);
  b.workspace_bytes = ft_plan_workspace_bytes(plan);
  b.workspace = m.get(b.workspace_bytes);
  ASSERT_EQ(ft_runtime_fill_random_as(rt, const_cast<void*>(b.x), T * H, 11, 1.0f, FT_FILL_BF16, 128), FT_OK) << ft_runtime_last_error(rt);
  ASSERT_EQ(ft_runtime_fill_random_as(rt, const_cast<void*>(b.w1), E * 2 * I * H, 12, kFp8CodeSpread, FT_FILL_FP8_CODES, 0), FT_OK);
  ASSERT_EQ(ft_runtime_fill_random_as(rt, const_cast<void*>(b.w2), E * H * I, 13, kFp8CodeSpread, FT_FILL_FP8_CODES, 0), FT_OK);
  ASSERT_EQ(ft_runtime_fill_random_as(rt, const_cast<float*>(b.w1_scales), n1, 14, float(1.0 / (kFp8CodeSpread * std::sqrt(double(H)))), FT_FILL_F32_SCALES, 0), FT_OK);
  ASSERT_EQ(ft_runtime_fill_random_as(rt, const_cast<float*>(b.w2_scales), n2, 15, float(1.0 / (kFp8CodeSpread * std::sqrt(double(I)))), FT_FILL_F32_SCALES, 0), FT_OK);
  EXPECT_NE(ft_runtime_fill_random_as(rt, const_cast<void*>(b.x), 8, 1, 1.0f, 9, 0), FT_OK);
  // The tiled copies a producer warpgroup's stages read (ignored by the others).
  void* w1_tiled = m.get(E * 2 * I * H);
  void* w2_tiled = m.get(E * H * I);
  ASSERT_EQ(ft_runtime_arrange_weights_of(rt, b.w1, w1_tiled, int(E * 2 * I), int(H), 1, FT_WEIGHT_LAYOUT_TILED, nullptr), FT_OK)
      << ft_runtime_last_error(rt);
  ASSERT_EQ(ft_runtime_arrange_weights_of(rt, b.w2, w2_tiled, int(E * H), int(I), 1, FT_WEIGHT_LAYOUT_TILED, nullptr), FT_OK)
      << ft_runtime_last_error(rt);
  b.w1_tiled = w1_tiled;
  b.w2_tiled = w2_tiled;
  if (want_mode == FT_SCALES_STATIC) {
    // Without inter_scale the static layer and its reference are refused, with the field's name.
    EXPECT_EQ(ft_plan_launch(plan, &b, nullptr), FT_ERR_ARGUMENT);
    EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("inter_scale"), std::string::npos) << ft_runtime_last_error(rt);
    EXPECT_EQ(ft_plan_reference(plan, &b, y_ref, nullptr), FT_ERR_ARGUMENT);
    EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("inter_scale"), std::string::npos) << ft_runtime_last_error(rt);
    // The scale calibrated on these inputs, as check-export does.
    rt::LayerBuffers in{};
    in.x = DevicePtr(std::uintptr_t(b.x)), in.topk_ids = DevicePtr(std::uintptr_t(b.topk_ids));
    in.topk_weights = DevicePtr(std::uintptr_t(b.topk_weights)), in.w1 = DevicePtr(std::uintptr_t(b.w1));
    in.x_scale = DevicePtr(std::uintptr_t(b.x_scale)), in.w1_scales = DevicePtr(std::uintptr_t(b.w1_scales));
    auto scale = rt::runtime_of(rt)->calibrate_inter_scale(*rt::plan_of(plan), in, {});
    ASSERT_TRUE(scale) << scale.error().describe();
    EXPECT_GT(*scale, 0.0f);
    EXPECT_NE(*scale, 1.0f) << "the calibration found no intermediate";
    b.inter_scale = static_cast<float*>(m.get(4));
    ASSERT_EQ(ft_runtime_upload(rt, const_cast<float*>(b.inter_scale), &*scale, 4), FT_OK);
  }

  ASSERT_EQ(ft_plan_reference(plan, &b, y_ref, nullptr), FT_OK) << ft_runtime_last_error(rt);
  ASSERT_EQ(ft_plan_launch_checked(plan, &b, nullptr, nullptr), FT_OK) << ft_runtime_last_error(rt);
  const std::vector<float> ref = bf16_values(rt, y_ref, T * H), got = bf16_values(rt, b.y, T * H);
  EXPECT_LT(rel_l2(got, ref), 4e-2);
  double norm = 0;
  for (float v : ref) norm += double(v) * v;
  EXPECT_GT(norm, 0.0);

  // A missing scale tensor is refused with its name, before any launch.
  ft_layer_buffers missing = b;
  missing.w2_scales = nullptr;
  EXPECT_EQ(ft_plan_launch(plan, &missing, nullptr), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("w2_scales"), std::string::npos) << ft_runtime_last_error(rt);

  // The mutant: W2's scales doubled. The layer must read them (Y doubles), so it no longer matches.
  std::vector<float> w2s(n2);
  ASSERT_EQ(ft_runtime_download(rt, w2s.data(), b.w2_scales, n2 * 4), FT_OK);
  for (float& v : w2s) v *= 2;
  ASSERT_EQ(ft_runtime_upload(rt, const_cast<float*>(b.w2_scales), w2s.data(), n2 * 4), FT_OK);
  ASSERT_EQ(ft_plan_launch_checked(plan, &b, nullptr, nullptr), FT_OK) << ft_runtime_last_error(rt);
  const std::vector<float> doubled = bf16_values(rt, b.y, T * H);
  EXPECT_GT(rel_l2(doubled, ref), 0.5);
  std::vector<float> twice(ref);
  for (float& v : twice) v *= 2;
  EXPECT_LT(rel_l2(doubled, twice), 4e-2);
}

// A scale mode, and the wgmma_producer values searched (on: wgmma atoms only,
// so both stages of a block128 layer promote in a producer warpgroup's
// consumers, wgmma_gemm.hpp).
struct SearchCase {
  const char* scales;
  const char* producer;
};

class EmuFp8Search : public ::testing::TestWithParam<SearchCase> {};

TEST_P(EmuFp8Search, VerifiesTimesPairsExportsAndRunsThroughTheRuntime) {
  test::ScratchDir dir;
  const test::ScopedEnv cache("FLYTUNE_CACHE_DIR", (std::string(FT_EMU_TEST_CACHE) + "/fp8-search").c_str());
  const std::string db = dir.file("fp8.db");
  const char* scales = GetParam().scales;
  const bool producer = std::string(GetParam().producer) == "on";
  const std::string space = fmt::format("small;wgmma_tile_m=64;wgmma_tile_n=64;wgmma_stages=3;tile_m=32;wgmma_producer={}{}",
                                        GetParam().producer, producer ? ";atom=wgmma_m64k32_f32_e4m3" : "");
  auto r = test::run_flytune({"search", "--emulate", "--target", "sm_90a", "--experts", "4", "--hidden", "128", "--inter", "256", "--topk", "2", "--dtype", "fp8", "--scales",
                              scales, "--space", space, "--tokens", "1", "--seed",
                              "7", "--db", db, "--no-baseline", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json sum = summary_json(r.output);
  ASSERT_TRUE(sum.is_object()) << r.output;
  ASSERT_EQ(sum["targets"].size(), 1u) << sum.dump(2);
  const json& t = sum["targets"][0];
  EXPECT_GT(t["verified"].get<int>(), 0) << sum.dump(2);
  EXPECT_EQ(t["verify_failed"], 0) << sum.dump(2);
  std::vector<std::string> kinds;
  for (const json& w : sum["winners"]) {
    kinds.push_back(w["kind"].get<std::string>());
    EXPECT_NE(w["kernel"].get<std::string>().find("_e4m3_"), std::string::npos) << w.dump();
    EXPECT_GT(w["median_us"].get<double>(), 0.0) << w.dump();
  }
  EXPECT_EQ(kinds, (std::vector<std::string>{"moe1", "moe2", "layer"})) << sum.dump(2);
  if (producer) {
    for (const json& w : sum["winners"])
      EXPECT_NE(w["kernel"].get<std::string>().find("_tiled_ws"), std::string::npos) << w.dump();
  }

  // The export checks its layers through the runtime before it writes them.
  const std::string out = dir.file("export");
  auto e = test::run_flytune({"export", "--db", db, "--out", out, "--check-routing", "uniform,masked"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("checked through the runtime on CPU emulator (sm_90a)"), std::string::npos) << e.output;
  std::ifstream mf(out + "/manifest.json");
  const json manifest = json::parse(mf, nullptr, false);
  ASSERT_TRUE(manifest.is_object());
  const json& problem = manifest["problems"][0];
  EXPECT_EQ(problem["dtype"], "e4m3");
  EXPECT_EQ(problem["scales"], scales);
  EXPECT_TRUE(problem["fp8"]["scale_tensors"].contains("w1_scales")) << problem.dump(2);
  const std::string mode = scales;
  EXPECT_EQ(problem["fp8"]["scale_tensors"].contains("x_scale"), mode == "per-tensor" || mode == "static") << problem.dump(2);
  EXPECT_EQ(problem["fp8"]["scale_tensors"].contains("inter_scale"), mode == "static") << problem.dump(2);
  // A static layer has no quantise step between its stages, and no bf16 intermediate.
  for (const json& bucket : problem["buckets"]) {
    bool quantise_inter = false;
    for (const json& step : bucket["steps"]) quantise_inter = quantise_inter || step.value("step", "") == "quantise_inter";
    if (mode == "static") {
      EXPECT_FALSE(quantise_inter) << bucket.dump(2);
    }
  }
  EXPECT_TRUE(manifest["support_units"][0]["symbols"].contains("quantise_x")) << manifest["support_units"].dump(2);

  // check-export at token counts the search never tuned.
  auto c = test::run_flytune({"check-export", "--emulate", out, "--tokens", "2,9", "--routing", "uniform,hot,one-empty"});
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("6 of 6 checks passed"), std::string::npos) << c.output;

  check_c_api(out, scales);
}

INSTANTIATE_TEST_SUITE_P(Sm90a, EmuFp8Search,
                         ::testing::Values(SearchCase{"per-tensor", "off"}, SearchCase{"per-token", "off"},
                                           SearchCase{"block128", "off"}, SearchCase{"block128", "on"},
                                           SearchCase{"static", "off"}, SearchCase{"static", "on"}),
                         [](const ::testing::TestParamInfo<SearchCase>& info) {
                           std::string s(info.param.scales);
                           std::erase(s, '-');
                           return std::string(info.param.producer) == "on" ? s + "_producer" : s;
                         });

}  // namespace
}  // namespace ft
