// What a search on an AMD GPU does when the GPU misbehaves, on the HIP test
// double (tests/hip/double/faults.hpp): a worker that dies of a GPU memory
// fault mid-variant, a search killed while its worker hangs mid-variant, and
// events that give times that are no times. The real binary, gfx942 (clang-19
// code objects), one bucket, T=1.
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "tests/hip/hip_search_support.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One stage-1 variant; stage 2 without and with split-K 4 (two of them, so
// the search still pairs a layer when one is lost).
constexpr const char* kSpace2 = "small;atom=mfma_f32_16x16x16_bf16;tile_m=32;split_k=1,4";
// One of each stage.
constexpr const char* kSpace1 = "small;atom=mfma_f32_16x16x16_bf16;tile_m=32;split_k=1";

// tiny with H = 64, I = 128 instead of 256, 512: each launch on the double's emulator costs a fifth, and
// what is checked here (the lost variant, the resume, the refused times) does not depend on the size (issue 50).
std::vector<std::string> search_args(const std::string& db, const char* space) {
  return {"search", "--target", "gfx942", "--device", "hip:0", "--problem", "tiny", "--hidden", "64", "--inter", "128",
          "--space", space, "--tokens", "1", "--seed", "7", "--no-baseline", "--db", db, "--json"};
}

using test::measurements;

std::map<std::int64_t, std::string> kernel_names(const std::string& path) {
  std::map<std::int64_t, std::string> out;
  auto s = db::Store::open(path, db::OpenMode::read_only);
  if (!s) return out;
  if (auto v = s->variants())
    for (const db::VariantRecord& r : *v) out[r.id] = r.kernel_name;
  return out;
}

// The worker aborts (what ROCm does on a GPU memory fault) at the first
// stage-2 launch of its life: the search loses that variant only -- recorded
// as failed with the worker's death, never timed --, restarts the worker,
// verifies the other stage-2 variant and pairs a layer. The same command
// again measures nothing it has and does not retry the lost variant.
TEST(HipFault, WorkerAbortedMidVariantLosesOnlyThatVariant) {
  test::ScratchDir dir;
  const test::HipDoubleEnv env(kSpace2);
  const std::string marker = dir.file("fault");
  const test::ScopedEnv fault("FLYTUNE_HIP_DOUBLE_FAULT", "abort@1:_moe2_");
  const test::ScopedEnv once("FLYTUNE_HIP_DOUBLE_FAULT_MARKER", marker.c_str());
  const std::string db = dir.file("amd.db");
  auto r = test::run_flytune(search_args(db, kSpace2));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(marker)) << "the double never faulted: " << r.output;
  const auto [worker, lost] = test::read_marker(marker);
  ASSERT_NE(lost.find("_moe2_"), std::string::npos) << lost;
  const json sum = test::summary_of(r.output);
  ASSERT_TRUE(sum.is_object()) << r.output;
  EXPECT_EQ(sum["gpus"][0]["crashes"], 1) << sum.dump(2);
  EXPECT_EQ(sum["targets"][0]["verified"], 2) << sum.dump(2);
  ASSERT_EQ(sum["winners"].size(), 3u) << sum.dump(2);
  for (const json& w : sum["winners"]) {  // a stage winner, or the layer's "stage1+stage2"
    const std::string k = w["kernel"];
    EXPECT_NE(k.substr(k.find('+') + 1), lost) << w.dump();
  }

  const auto names = kernel_names(db);
  const auto before = measurements(db);
  for (const db::MeasurementRecord& m : before) {
    if (names.at(m.variant_id) != lost) continue;
    EXPECT_EQ(m.phase, "verify") << "the lost variant was timed";
    EXPECT_NE(m.status, db::MeasurementStatus::ok);
    EXPECT_FALSE(m.error_message.empty());
  }

  auto again = test::run_flytune(search_args(db, kSpace2));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const json sum2 = test::summary_of(again.output);
  EXPECT_EQ(sum2["gpus"][0]["crashes"], 0) << sum2.dump(2);
  const auto names2 = kernel_names(db);
  for (const db::MeasurementRecord& m : measurements(db, 2)) {
    EXPECT_NE(m.phase, "verify") << names2.at(m.variant_id) << " verified again";
    EXPECT_NE(names2.at(m.variant_id), lost) << "the lost variant was measured again";
  }
  EXPECT_GE(sum2["resumed"].get<std::size_t>(), 3u) << sum2.dump(2);
}

// The worker hangs in the first stage-2 launch (a kernel that never ends);
// while it does, the search and the worker are killed with SIGKILL. The same
// command again closes the dead run, takes stage 1's verification from the
// database and verifies only the variant that was in flight, then finishes.
TEST(HipFault, SearchKilledWhileTheWorkerHangsResumesLosingOnlyThatVariant) {
  test::ScratchDir dir;
  const test::HipDoubleEnv env(kSpace1);
  const std::string marker = dir.file("hang");
  const std::string db = dir.file("amd.db");
  const std::string in_flight = test::kill_search_during_hang(search_args(db, kSpace1), "hang@1:_moe2_", marker, dir.file("first.log"));
  ASSERT_FALSE(in_flight.empty());

  std::set<std::string> verified_before;
  const auto names = kernel_names(db);
  for (const db::MeasurementRecord& m : measurements(db))
    if (m.phase == "verify") verified_before.insert(names.at(m.variant_id));
  EXPECT_EQ(verified_before.size(), 1u);
  EXPECT_FALSE(verified_before.contains(in_flight));

  const json sum = test::resume_after_kill(search_args(db, kSpace1));
  ASSERT_TRUE(sum.is_object());
  EXPECT_EQ(sum["winners"].size(), 3u) << sum.dump(2);
  std::vector<std::string> verified_again;
  const auto names2 = kernel_names(db);
  for (const db::MeasurementRecord& m : measurements(db, 2))
    if (m.phase == "verify") verified_again.push_back(names2.at(m.variant_id));
  EXPECT_EQ(verified_again, std::vector<std::string>{in_flight});
}

// Events that give NaN or negative times: every timing is refused with the
// reason, nothing is recorded as a time, and the search ends without a
// layer winner (exit 4) rather than with winners chosen on such numbers.
TEST(HipFault, TimesThatAreNoTimesAreRefused) {
  for (const char* mode : {"nan", "negative"}) {
    SCOPED_TRACE(mode);
    test::ScratchDir dir;
    const test::HipDoubleEnv env(kSpace1);
    const test::ScopedEnv events("FLYTUNE_HIP_DOUBLE_EVENTS", mode);
    const std::string db = dir.file("amd.db");
    auto r = test::run_flytune(search_args(db, kSpace1));
    EXPECT_EQ(r.exit_code, 4) << r.output;
    std::size_t refused = 0;
    for (const db::MeasurementRecord& m : measurements(db)) {
      if (m.phase == "verify") {
        EXPECT_EQ(m.status, db::MeasurementStatus::ok) << m.error_message;  // verification needs no events
        continue;
      }
      EXPECT_NE(m.status, db::MeasurementStatus::ok) << m.phase;
      EXPECT_FALSE(m.median_us) << m.phase;
      EXPECT_NE(m.error_message.find("no timing is recorded from times that are not a finite, non-negative number"),
                std::string::npos)
          << m.error_message;
      ++refused;
    }
    EXPECT_GE(refused, 2u);
  }
}

}  // namespace
}  // namespace ft
