// The runtime under faults, on the CPU emulator over the recorded export
// (tests/data/tiny_forms.db):
//  - every device call a server's sequence makes (open, select, allocate,
//    arrange, launch, check, reference, free, close) failed in turn by a
//    fault-injecting device: the failing call answers FT_ERR_DEVICE with the
//    device's message, and once the runtime is closed no allocation, module
//    or stream is left;
//  - the export folder deleted, then replaced, while a runtime holds it: its
//    loaded kernels keep running and checking right, a new open of the
//    deleted folder is refused with one line;
//  - a launch, a copy and a synchronisation on a destroyed stream are
//    FT_ERR_DEVICE, not a crash, and the runtime goes on working.
#include <filesystem>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "layer/operation.hpp"
#include "runtime/check/layer_check.hpp"
#include "runtime/check/observed_device.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "tests/support/forms_export.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;

check::DeviceWrap observed_by(const std::shared_ptr<check::Observed>& seen) {
  return [seen](std::unique_ptr<Device> d) -> std::unique_ptr<Device> {
    return std::make_unique<check::ObservedDevice>(std::move(d), seen);
  };
}

// A server's sequence on one runtime: open, weights, one layer checked.
// Returns the first failing status (FT_OK when all went through) and its message.
std::pair<int, std::string> serve_once(const std::string& dir, const std::shared_ptr<check::Observed>& seen) {
  auto opened = check::open_on_emulator(dir, observed_by(seen));
  if (!opened) return {opened.error().code == Errc::device ? FT_ERR_DEVICE : FT_ERR_INTERNAL, opened.error().describe()};
  ft_runtime* rt = *opened;
  std::pair<int, std::string> out{FT_OK, ""};
  {
    const std::string key = ft_runtime_problem_key(rt, 0);
    ft_plan* first = nullptr;
    if (ft_runtime_select(rt, key.c_str(), 5, &first) != FT_OK) {
      ft_runtime_close(rt);
      return {FT_ERR_INTERNAL, "select"};
    }
    const Problem problem = rt::plan_of(first)->problem->problem;
    ft_plan_free(first);
    check::ProblemWeights weights(rt, problem, 7);
    if (!weights.error().empty()) {
      out = {FT_ERR_DEVICE, weights.error()};
    } else {
      const check::CheckRow row = check::check_row(op::moe_forward(), rt, weights, key, 5, "uniform", 11);
      if (!row.passed) out = {row.summary.find("injected fault") != std::string::npos ? FT_ERR_DEVICE : FT_ERR_INTERNAL, row.summary};
    }
  }
  ft_runtime_close(rt);
  return out;
}

TEST(RuntimeFaults, EachFailingDeviceCallIsADeviceErrorAndLeavesNothing) {
  ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
  const std::string dir = test::forms_export().dir;
  // The clean run first: how many calls the sequence makes, and that it passes.
  auto clean = std::make_shared<check::Observed>();
  clean->faults = check::fault_alloc | check::fault_load | check::fault_launch | check::fault_copy;
  auto [st, msg] = serve_once(dir, clean);
  ASSERT_EQ(st, FT_OK) << msg;
  const long calls = clean->calls.load();
  ASSERT_GT(calls, 20);
  EXPECT_EQ(clean->live_allocations(), 0u);
  int failed = 0;
  for (long n = 1; n <= calls; ++n) {
    auto seen = std::make_shared<check::Observed>();
    seen->faults = clean->faults;
    seen->fail_at = n;
    auto [status, message] = serve_once(dir, seen);
    ASSERT_EQ(seen->injected.load(), 1) << "call " << n;
    EXPECT_EQ(status, FT_ERR_DEVICE) << "call " << n << ": " << message;
    EXPECT_NE(message.find("injected fault"), std::string::npos) << "call " << n << ": " << message;
    EXPECT_EQ(seen->live_allocations(), 0u) << "call " << n << " left device memory: " << message;
    EXPECT_EQ(seen->modules, 0) << "call " << n << " left modules loaded: " << message;
    EXPECT_EQ(seen->streams, 0) << "call " << n << " left streams: " << message;
    failed += status == FT_ERR_DEVICE;
  }
  std::printf("%d of %ld device calls failed in turn: each a device error, nothing left\n", failed, calls);
}

TEST(RuntimeFaults, LoadedKernelsOutliveTheirFolder) {
  ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
  test::ScratchDir scratch;
  const std::string dir = scratch.file("served");
  fs::copy(test::forms_export().dir, dir);
  test::EmulatedRuntime held(dir);
  ASSERT_NE(held.rt, nullptr) << held.error;
  const std::string key = ft_runtime_problem_key(held.rt, 0);
  ft_plan* first = nullptr;
  ASSERT_EQ(ft_runtime_select(held.rt, key.c_str(), 1, &first), FT_OK);
  const Problem problem = rt::plan_of(first)->problem->problem;
  ft_plan_free(first);
  check::ProblemWeights weights(held.rt, problem, 3);
  ASSERT_TRUE(weights.error().empty()) << weights.error();

  fs::remove_all(dir);
  for (int T : {3, 17}) {
    const check::CheckRow row = check::check_row(op::moe_forward(), held.rt, weights, key, T, "zipf", 5);
    EXPECT_TRUE(row.passed) << "folder deleted, T=" << T << ": " << row.summary;
  }
  char err[512] = {0};
  ft_runtime* again = nullptr;
  EXPECT_EQ(ft_runtime_open(dir.c_str(), &again, err, sizeof err), FT_ERR_FILE);
  EXPECT_EQ(again, nullptr);
  EXPECT_NE(std::string(err).find("manifest"), std::string::npos) << err;
  auto reopened = check::open_on_emulator(dir);
  EXPECT_FALSE(reopened);

  // Replaced by something else under the same name: a folder whose manifest
  // is not one, and the runtime still serves what it loaded.
  fs::create_directories(dir);
  test::write_bytes(dir + "/manifest.json", "{\"schema_version\": 2, \"problems\": 7}");
  const check::CheckRow row = check::check_row(op::moe_forward(), held.rt, weights, key, 9, "masked", 6);
  EXPECT_TRUE(row.passed) << "folder replaced: " << row.summary;
  EXPECT_EQ(ft_runtime_open(dir.c_str(), &again, err, sizeof err), FT_ERR_MANIFEST) << err;
}

TEST(RuntimeFaults, ADestroyedStreamIsADeviceErrorNotACrash) {
  ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
  test::EmulatedRuntime held(test::forms_export().dir);
  ASSERT_NE(held.rt, nullptr) << held.error;
  ft_runtime* rt = held.rt;
  Device& dev = rt::runtime_of(rt)->device();
  auto stream = dev.create_stream();
  ASSERT_TRUE(stream);
  ASSERT_TRUE(dev.destroy_stream(*stream));

  const std::string key = ft_runtime_problem_key(rt, 0);
  ft_plan* plan = nullptr;
  ASSERT_EQ(ft_runtime_select(rt, key.c_str(), 4, &plan), FT_OK);
  const Problem problem = rt::plan_of(plan)->problem->problem;
  check::ProblemWeights weights(rt, problem, 2);
  ASSERT_TRUE(weights.error().empty()) << weights.error();
  check::Allocations mem(rt);
  ft_layer_buffers b{};
  const std::size_t T = 4, H = std::size_t(problem.hidden), k = std::size_t(problem.topk);
  b.x = mem.get(T * H * 2);
  b.topk_ids = static_cast<const std::int32_t*>(mem.get(T * k * 4));
  b.topk_weights = static_cast<const float*>(mem.get(T * k * 4));
  b.y = mem.get(T * H * 2);
  b.w1 = weights.plain(1);
  b.w2 = weights.plain(2);
  b.workspace_bytes = ft_plan_workspace_bytes(plan);
  b.workspace = mem.get(b.workspace_bytes);
  for (int stage : {1, 2}) {
    if (ft_plan_needs_shuffled(plan, stage)) (stage == 1 ? b.w1_shuffled : b.w2_shuffled) = weights.arranged(stage, FT_WEIGHT_LAYOUT_SHUFFLED);
    if (ft_plan_needs_tiled(plan, stage)) (stage == 1 ? b.w1_tiled : b.w2_tiled) = weights.arranged(stage, FT_WEIGHT_LAYOUT_TILED);
  }
  EXPECT_EQ(ft_plan_launch(plan, &b, stream->p), FT_ERR_DEVICE);
  EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("not a live stream of this device"), std::string::npos)
      << ft_runtime_last_error(rt);
  EXPECT_EQ(ft_runtime_synchronize(rt, stream->p), FT_ERR_DEVICE);
  EXPECT_EQ(ft_runtime_arrange_weights(rt, weights.plain(1), mem.get(2 * std::size_t(problem.experts) * 2 * std::size_t(problem.inter) * H),
                                       problem.experts * 2 * problem.inter, problem.hidden, FT_WEIGHT_LAYOUT_SHUFFLED, stream->p),
            FT_ERR_DEVICE);
  ft_plan_free(plan);
  // The runtime serves on.
  const check::CheckRow row = check::check_row(op::moe_forward(), rt, weights, key, 4, "uniform", 9);
  EXPECT_TRUE(row.passed) << row.summary;
}

}  // namespace
}  // namespace ft
