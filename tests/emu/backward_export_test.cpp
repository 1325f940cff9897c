// The backward from search to runtime on the CPU emulator: `flytune search
// --emulate --pass both` on a tiny layer (gfx950, E = 4, H = I = 64, top-2,
// T = 1 and 9), `flytune export` (which runs check-export on the staged
// export), and `flytune check-export --emulate`: the backward rows pass. A
// runtime that skips the program's clears must fail them; the C API's
// backward entry points refuse what they cannot run, one line each.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "flytune_runtime.h"
#include "layer/operation.hpp"
#include "runtime/check/backward_check.hpp"
#include "runtime/check/check_export.hpp"
#include "runtime/check/observed_device.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::run_flytune;

constexpr const char* kKey = "moe_e4_h64_i64_k2_bf16_swiglu_uniform";

// The search and the export, once per test process.
struct BothExport {
  test::ScratchDir scratch;
  std::string dir, error, export_output;
  json manifest;
};

// `flytune export` of `db` into e.dir with `check`, and the manifest read.
void export_into(BothExport& e, const std::string& db, const char* check) {
  e.dir = e.scratch.file("export");
  auto x = run_flytune({"export", "--db", db, "--out", e.dir, "--check", check});
  e.export_output = x.output;
  if (x.exit_code != 0) {
    e.error = "export: " + x.output;
    return;
  }
  std::ifstream f(e.dir + "/manifest.json");
  e.manifest = json::parse(f);
}

const BothExport& both_export() {
  static BothExport e;
  static bool done = false;
  if (done) return e;
  done = true;
  // The emulator tests' compile cache: each test process (ctest runs one per test) builds nothing again.
  const test::ScopedEnv cache("FLYTUNE_CACHE_DIR", (std::string(FT_EMU_TEST_CACHE) + "/search").c_str());
  const std::string db = e.scratch.file("both.db");
  auto s = run_flytune({"search", "--emulate", "--target", "gfx950", "--experts", "4", "--hidden", "64", "--inter", "64", "--topk",
                        "2", "--pass", "both", "--space", "small", "--budget", "1", "--tokens", "1,9", "--seed", "5", "--db", db});
  if (s.exit_code != 0) {
    e.error = "search: " + s.output;
    return e;
  }
  export_into(e, db, "emulate");
  return e;
}

// The same search's output committed (tests/data/tiny_emu_train.db, the Python training tests'; python/tests/
// conftest.py says how it was made), exported unchecked: for the C API test, which needs an export with backward
// buckets rather than a second emulated search (about 100 s of a cold CI run on two cores; the search above is
// the test of the search).
const BothExport& committed_export() {
  static BothExport e;
  static bool done = false;
  if (done) return e;
  done = true;
  export_into(e, std::string(FT_TEST_DATA_DIR) + "/tiny_emu_train.db", "none");
  return e;
}

// A runtime handle over the export on the emulator, optionally through an ObservedDevice.
struct Opened {
  ft_runtime* rt = nullptr;
  std::string error;
  Opened(const std::string& dir, std::shared_ptr<check::Observed> seen = nullptr) {
    check::DeviceWrap wrap;
    if (seen) wrap = [seen](std::unique_ptr<Device> d) -> std::unique_ptr<Device> {
      return std::make_unique<check::ObservedDevice>(std::move(d), seen);
    };
    auto r = check::open_on_emulator(dir, wrap);
    if (r) rt = *r;
    else error = r.error().describe();
  }
  ~Opened() { ft_runtime_close(rt); }
};

TEST(BackwardExport, SearchBothExportsAndPassesCheckExportAndAMutantRuntimeFails) {
  const BothExport& e = both_export();
  ASSERT_TRUE(e.error.empty()) << e.error;
  // export ran check-export on the staged folder: forward and backward rows, all passing.
  EXPECT_NE(e.export_output.find("2 bucket(s), 2 backward bucket(s)"), std::string::npos) << e.export_output;
  EXPECT_NE(e.export_output.find("50 of 50 checks passed"), std::string::npos) << e.export_output;
  const json& bw = e.manifest["problems"][0]["backward"];
  EXPECT_EQ(bw["operation"], "moe_backward");
  ASSERT_EQ(bw["buckets"].size(), 2u);
  EXPECT_EQ(bw["buckets"][0]["tokens"], 1);
  EXPECT_EQ(bw["buckets"][1]["tokens"], 9);
  EXPECT_TRUE(bw["buckets"][1]["stages"].contains("wgrad1"));
  // Searched and exported by this flytune: its wgrad kernels take KGroupedArgs with c16, so
  // check-export's backward rows also launched with dw1_16, dw2_16 (the runtime allows it).
  for (const json& b : bw["buckets"]) EXPECT_EQ(b["kgrouped_args_bytes"], 96) << b["tokens"];
  {  // and the runtime says so before a launch, for a plan of each bucket
    Opened o(e.dir);
    ASSERT_TRUE(o.rt) << o.error;
    for (int tokens : {1, 5, 9, 13}) {
      ft_plan* plan = nullptr;
      ASSERT_EQ(ft_runtime_select(o.rt, kKey, tokens, &plan), FT_OK);
      EXPECT_EQ(ft_plan_backward_takes_dw16(plan), 1) << tokens;
      ft_plan_free(plan);
    }
  }

  auto r = run_flytune({"check-export", e.dir, "--emulate", "--tokens", "1,5,9,13"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::size_t backward_ok = 0;
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);)
    backward_ok += line.find(" backward ") != std::string::npos && line.find("  ok  ") != std::string::npos;
  EXPECT_EQ(backward_ok, 4u * 5u) << r.output;  // 4 T x 5 routings, T = 13 above the largest bucket
  EXPECT_NE(r.output.find("check-export: 40 of 40 checks passed"), std::string::npos) << r.output;

  // The mutant runtime: the program's memsets (clear_d_weights, clear_dx)
  // never reach the device, so dX and d(topk_weights) add into the poison:
  // the backward rows fail, naming a gradient that is not finite. (One test
  // with the search above: ctest runs each test in a process of its own.)
  {
    auto seen = std::make_shared<check::Observed>();
    Opened o(e.dir, seen);
    ASSERT_TRUE(o.rt) << o.error;
    ft_plan* plan = nullptr;
    ASSERT_EQ(ft_runtime_select(o.rt, kKey, 9, &plan), FT_OK);
    ft_problem_shape shape{};
    ft_plan_shape(plan, &shape);
    ft_plan_free(plan);
    Problem p;
    p.experts = shape.experts, p.hidden = shape.hidden, p.inter = shape.inter, p.topk = shape.topk;
    check::ProblemWeights weights(o.rt, p, 0x5eed);
    ASSERT_TRUE(weights.error().empty()) << weights.error();
    for (bool skip : {false, true}) {
      seen->skip_memsets = skip;
      for (const char* routing : {"uniform", "masked"}) {
        const check::CheckRow row = check::check_row(op::moe_backward(), o.rt, weights, kKey, 7, routing, 11);
        EXPECT_EQ(row.pass, "backward");
        EXPECT_EQ(row.passed, !skip) << routing << ": " << row.summary;
        if (skip) { EXPECT_NE(row.summary.find("NaN"), std::string::npos) << row.summary; }
      }
  }
  }
}

// Buffers of a plan's backward call, allocated through the runtime.
struct GradCall {
  ft_runtime* rt;
  std::vector<void*> held;
  ft_layer_grads g{};
  void* get(std::size_t bytes) {
    void* p = nullptr;
    EXPECT_EQ(ft_runtime_alloc(rt, bytes, &p), FT_OK);
    held.push_back(p);
    return p;
  }
  GradCall(ft_runtime* r, const ft_plan* plan) : rt(r) {
    ft_problem_shape s{};
    ft_plan_shape(plan, &s);
    const std::size_t T = std::size_t(ft_plan_tokens(plan)), H = std::size_t(s.hidden), I = std::size_t(s.inter),
                      E = std::size_t(s.experts), k = std::size_t(s.topk);
    g.x = get(T * H * 2), g.topk_ids = static_cast<const std::int32_t*>(get(T * k * 4));
    g.topk_weights = static_cast<const float*>(get(T * k * 4)), g.w1 = get(E * 2 * I * H * 2), g.w2 = get(E * H * I * 2);
    g.dy = get(T * H * 2), g.saved_gate_up = get(T * k * 2 * I * 2), g.saved_inter = get(T * k * I * 2);
    g.dx = static_cast<float*>(get(T * H * 4)), g.dw1 = static_cast<float*>(get(E * 2 * I * H * 4));
    g.dw2 = static_cast<float*>(get(E * H * I * 4)), g.d_topk_weights = static_cast<float*>(get(T * k * 4));
    g.workspace_bytes = ft_plan_backward_workspace_bytes(plan, int(T));
    g.workspace = get(g.workspace_bytes);
    const std::vector<std::int32_t> ids(T * k, 0);  // a valid routing: every slot on expert 0
    EXPECT_EQ(ft_runtime_upload(rt, const_cast<std::int32_t*>(g.topk_ids), ids.data(), ids.size() * 4), FT_OK);
  }
  ~GradCall() {
    for (void* p : held) ft_runtime_free(rt, p);
  }
};

struct Refusal {
  const char* what;
  std::function<int(const ft_plan*, ft_layer_grads)> call;
  int status;
  const char* says;
};

TEST(BackwardExport, CApiRefusesWithOneLineAndWithoutABackward) {
  const BothExport& e = committed_export();
  ASSERT_TRUE(e.error.empty()) << e.error;
  Opened o(e.dir);
  ASSERT_TRUE(o.rt) << o.error;
  ft_plan* plan = nullptr;
  ASSERT_EQ(ft_runtime_select(o.rt, kKey, 5, &plan), FT_OK);
  const std::unique_ptr<ft_plan, void (*)(ft_plan*)> guard(plan, ft_plan_free);
  EXPECT_EQ(ft_plan_has_backward(plan), 1);
  EXPECT_EQ(ft_plan_backward_bucket(plan), 9);
  // The committed database's kernels predate KGroupedArgs::c16 (the refusal below says so at launch).
  EXPECT_EQ(ft_plan_backward_takes_dw16(plan), 0);
  EXPECT_EQ(ft_plan_backward_takes_dw16(nullptr), 0);
  // The workspace rule: never less for a larger T; 0 with a reason outside [1, 2^24].
  const std::size_t at5 = ft_plan_backward_workspace_bytes(plan, 5);
  EXPECT_GT(at5, 0u);
  EXPECT_LE(at5, ft_plan_backward_workspace_bytes(plan, 9));
  EXPECT_LE(ft_plan_backward_workspace_bytes(plan, 9), ft_plan_backward_workspace_bytes(plan, 4096));
  EXPECT_EQ(ft_plan_backward_workspace_bytes(plan, 0), 0u);
  EXPECT_NE(std::string(ft_runtime_last_error(o.rt)).find("backward"), std::string::npos) << ft_runtime_last_error(o.rt);
  EXPECT_EQ(ft_plan_backward_workspace_bytes(nullptr, 5), 0u);

  GradCall call(o.rt, plan);
  ASSERT_EQ(ft_plan_backward_saved(plan, &call.g, nullptr), FT_OK) << ft_runtime_last_error(o.rt);
  ASSERT_EQ(ft_plan_backward_launch(plan, &call.g, nullptr), FT_OK) << ft_runtime_last_error(o.rt);
  // A caller of the ABI 1.1 header passes 120 bytes, without dw1_16 and dw2_16: the fp32 weight gradients.
  EXPECT_EQ(ft_plan_backward_launch_sized(plan, &call.g, 120, nullptr), FT_OK) << ft_runtime_last_error(o.rt);
  const std::vector<Refusal> cases{
      {"a short struct", [](const ft_plan* p, ft_layer_grads g) { return ft_plan_backward_launch_sized(p, &g, 64, nullptr); },
       FT_ERR_ARGUMENT, "ft_layer_grads of 64 bytes: not a size of this struct"},
      {"a struct not a multiple of 8",
       [](const ft_plan* p, ft_layer_grads g) { return ft_plan_backward_launch_sized(p, &g, sizeof g + 4, nullptr); },
       FT_ERR_ARGUMENT, "not a size of this struct"},
      {"a field this library does not know",
       [](const ft_plan* p, ft_layer_grads g) {
         unsigned char bytes[sizeof g + 8] = {};
         std::memcpy(bytes, &g, sizeof g);
         bytes[sizeof g] = 1;
         return ft_plan_backward_launch_sized(p, reinterpret_cast<const ft_layer_grads*>(bytes), sizeof bytes, nullptr);
       },
       FT_ERR_ARGUMENT, "does not know: use a newer libflytune_runtime"},
      {"null dy and dw2",
       [](const ft_plan* p, ft_layer_grads g) {
         g.dy = nullptr, g.dw2 = nullptr;
         return ft_plan_backward_launch(p, &g, nullptr);
       },
       FT_ERR_ARGUMENT, "null layer buffers: dy, dw2"},
      {"no workspace",
       [](const ft_plan* p, ft_layer_grads g) {
         g.workspace = nullptr;
         return ft_plan_backward_launch(p, &g, nullptr);
       },
       FT_ERR_ARGUMENT, "null layer buffers: workspace"},
      {"a short workspace",
       [](const ft_plan* p, ft_layer_grads g) {
         g.workspace_bytes -= 1;
         return ft_plan_backward_launch(p, &g, nullptr);
       },
       FT_ERR_ARGUMENT, "the backward's workspace holds"},
      {"16-bit dW from kernels that predate them",  // the committed database's: an earlier flytune compiled them
       [](const ft_plan* p, ft_layer_grads g) {
         g.dw1_16 = g.dw1, g.dw2_16 = g.dw2, g.dw1 = nullptr, g.dw2 = nullptr;
         return ft_plan_backward_launch(p, &g, nullptr);
       },
       FT_ERR_NOT_FOUND, "the export's backward kernels predate the 16-bit weight gradients (dw1_16, dw2_16)"},
      {"saved without x",
       [](const ft_plan* p, ft_layer_grads g) {
         g.x = nullptr;
         return ft_plan_backward_saved(p, &g, nullptr);
       },
       FT_ERR_ARGUMENT, "null layer buffers: x"},
      {"no plan", [](const ft_plan*, ft_layer_grads g) { return ft_plan_backward_launch(nullptr, &g, nullptr); }, FT_ERR_ARGUMENT,
       "plan and grads must not be null"},
  };
  for (const Refusal& c : cases) {
    EXPECT_EQ(c.call(plan, call.g), c.status) << c.what;
    // A call without a plan has no runtime: its message is the handle-less one.
    const std::string msg = ft_runtime_last_error(std::string(c.what) == "no plan" ? nullptr : o.rt);
    EXPECT_NE(msg.find(c.says), std::string::npos) << c.what << ": " << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << c.what;
  }

  // An export without a backward (its manifest's "backward" removed): plans
  // have none, and the backward calls say so.
  {
    test::ScratchDir scratch;
    const std::string dir = scratch.file("forward-only");
    fs::copy(e.dir, dir);
    json m = e.manifest;
    m["problems"][0].erase("backward");
    std::ofstream(dir + "/manifest.json") << m.dump(2);
    Opened o(dir);
    ASSERT_TRUE(o.rt) << o.error;
    ft_plan* plan = nullptr;
    ASSERT_EQ(ft_runtime_select(o.rt, kKey, 5, &plan), FT_OK);
    const std::unique_ptr<ft_plan, void (*)(ft_plan*)> guard(plan, ft_plan_free);
    EXPECT_EQ(ft_plan_has_backward(plan), 0);
    EXPECT_EQ(ft_plan_backward_bucket(plan), 0);
    EXPECT_EQ(ft_plan_backward_takes_dw16(plan), 0);
    EXPECT_EQ(ft_plan_backward_workspace_bytes(plan, 5), 0u);
    ft_layer_grads g{};
    for (int st : {ft_plan_backward_launch(plan, &g, nullptr), ft_plan_backward_saved(plan, &g, nullptr)}) {
      EXPECT_EQ(st, FT_ERR_NOT_FOUND);
      const std::string msg = ft_runtime_last_error(o.rt);
      EXPECT_NE(msg.find("the export has no backward of this problem"), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
  // check-export has forward rows alone.
  auto r = run_flytune({"check-export", dir, "--emulate", "--tokens", "5"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find(" backward "), std::string::npos) << r.output;
  }
}

}  // namespace
}  // namespace ft
