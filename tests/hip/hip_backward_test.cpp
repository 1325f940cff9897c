// flytune search --pass backward on an AMD GPU -- the HIP test double's
// gfx942 (tests/hip/double): the backward GEMMs compiled by clang-19 into real
// code objects, measured by a `flytune worker --device hip:0` whose launches
// the double checks against their AMDGPU metadata and runs on the emulator.
// The worker aborts (as ROCm does on a GPU memory fault) at the first dgrad1
// launch of its life, in the first program's verification: the search loses
// that program only -- recorded as failed with the worker's death, never
// timed --, restarts the worker, verifies and times the others and records a
// backward winner. The same command again measures nothing and does not retry
// the lost program. And a search killed (SIGKILL, with its worker) while the
// worker hangs in that launch resumes: the re-run verifies exactly the program
// that was in flight. E = 4, H = I = 64, top-2, two configurations per role
// (five programs), one bucket.
#include <filesystem>
#include <map>
#include <set>
#include <string>
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
using test::measurements;

std::vector<std::string> search_args(const std::string& db) {
  return {"search", "--target", "gfx942", "--device", "hip:0", "--pass", "backward", "--experts", "4", "--topk", "2",
          "--hidden", "64", "--inter", "64", "--space", "small", "--budget", "2", "--tokens", "1", "--seed", "7",
          "--db", db, "--json"};
}

// Program rows (kind backward) by id -> name.
std::map<std::int64_t, std::string> programs(const std::string& path) {
  std::map<std::int64_t, std::string> out;
  auto s = db::Store::open(path, db::OpenMode::read_only);
  if (!s) return out;
  if (auto v = s->variants())
    for (const db::VariantRecord& r : *v)
      if (r.kind == "backward") out[r.id] = r.kernel_name;
  return out;
}

TEST(HipBackward, WorkerAbortedMidProgramLosesOnlyThatProgram) {
  test::ScratchDir dir;
  const test::HipDoubleEnv env("small");
  const std::string marker = dir.file("fault");
  const test::ScopedEnv fault("FLYTUNE_HIP_DOUBLE_FAULT", "abort@1:_dgrad1_");
  const test::ScopedEnv once("FLYTUNE_HIP_DOUBLE_FAULT_MARKER", marker.c_str());
  const std::string db = dir.file("amd.db");
  auto r = test::run_flytune(search_args(db));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(fs::exists(marker)) << "the double never faulted: " << r.output;
  const json sum = test::summary_of(r.output);
  ASSERT_TRUE(sum.is_object()) << r.output;
  ASSERT_EQ(sum["gpus"].size(), 1u) << sum.dump(2);
  EXPECT_EQ(sum["gpus"][0]["crashes"], 1) << sum.dump(2);
  EXPECT_EQ(sum["gpus"][0]["dead"], false);
  EXPECT_EQ(sum["gpus"][0]["verified"], 4) << sum.dump(2);

  const auto names = programs(db);
  ASSERT_EQ(names.size(), 5u);  // the base lost: no combined program (search/role_descent.hpp)
  std::string lost;
  std::size_t verified_ok = 0, timed = 0;
  for (const db::MeasurementRecord& m : measurements(db)) {
    ASSERT_TRUE(names.contains(m.variant_id));
    if (m.phase == "verify" && m.status != db::MeasurementStatus::ok) {
      EXPECT_TRUE(lost.empty()) << "a second program lost: " << names.at(m.variant_id);
      lost = names.at(m.variant_id);
      EXPECT_NE(m.error_message.find("worker"), std::string::npos) << m.error_message;
    }
    verified_ok += m.phase == "verify" && m.status == db::MeasurementStatus::ok;
    if (m.phase == "long") {
      ++timed;
      EXPECT_EQ(m.status, db::MeasurementStatus::ok) << m.error_message;
      EXPECT_EQ(m.samples, 30);  // the GPU's long timing
    }
  }
  EXPECT_EQ(names.begin()->second, lost) << "the base program (the first verified) ran the first dgrad1 launch";
  EXPECT_EQ(verified_ok, 4u);
  EXPECT_EQ(timed, 4u);
  ASSERT_EQ(sum["winners"].size(), 1u) << sum.dump(2);
  EXPECT_EQ(sum["winners"][0]["pass"], "backward");
  EXPECT_NE(sum["winners"][0]["kernel"], lost);

  auto again = test::run_flytune(search_args(db));
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const json sum2 = test::summary_of(again.output);
  EXPECT_EQ(sum2["measurements"], 0) << sum2.dump(2);
  EXPECT_EQ(sum2["resumed"], 9) << sum2.dump(2);  // five verdicts, four timings
  EXPECT_EQ(sum2["gpus"][0]["crashes"], 0);
  EXPECT_EQ(sum2["winners"][0]["kernel"], sum["winners"][0]["kernel"]);
}

// The third program's verification (the one varying dgrad1: the third
// dgrad1 launch of the worker's life) hangs; the search and its worker are
// SIGKILLed during the hang. The re-run closes the dead run, takes the two
// verdicts it has from the store and verifies the other three, the one in
// flight among them (and a combined program, if the re-run makes one).
TEST(HipBackward, SearchKilledWhileTheWorkerHangsResumesVerifyingOnlyWhatItLacks) {
  test::ScratchDir dir;
  const test::HipDoubleEnv env("small");
  const std::string marker = dir.file("hang");
  const std::string db = dir.file("amd.db");
  // The dgrad1 configuration of the program in flight.
  const std::string in_flight = test::kill_search_during_hang(search_args(db), "hang@3:_dgrad1_", marker, dir.file("first.log"));
  ASSERT_NE(in_flight.find("_dgrad1_"), std::string::npos) << in_flight;

  const auto names = programs(db);
  std::set<std::string> before;
  for (const db::MeasurementRecord& m : measurements(db)) {
    EXPECT_EQ(m.phase, "verify");
    EXPECT_EQ(m.status, db::MeasurementStatus::ok) << m.error_message;
    before.insert(names.at(m.variant_id));
  }
  ASSERT_EQ(before.size(), 2u);
  for (const std::string& p : before) EXPECT_EQ(p.find(in_flight), std::string::npos) << p;

  const json sum = test::resume_after_kill(search_args(db));
  ASSERT_TRUE(sum.is_object());
  EXPECT_EQ(sum["gpus"][0]["crashes"], 0) << sum.dump(2);
  ASSERT_EQ(sum["winners"].size(), 1u) << sum.dump(2);
  // The re-run may add the program of each role's fastest configuration
  // (search/role_descent.hpp: timing-dependent on the double), verified there too.
  const auto all = programs(db);
  ASSERT_GE(all.size(), names.size());
  ASSERT_LE(all.size(), names.size() + 1);
  std::set<std::string> again;
  bool in_flight_verified = false;
  for (const db::MeasurementRecord& m : measurements(db, 2)) {
    EXPECT_EQ(m.status, db::MeasurementStatus::ok) << m.phase << ": " << m.error_message;
    if (m.phase != "verify") continue;
    const std::string& p = all.at(m.variant_id);
    EXPECT_FALSE(before.contains(p)) << p << " verified again";
    again.insert(p);
    in_flight_verified = in_flight_verified || p.find(in_flight) != std::string::npos;
  }
  EXPECT_EQ(again.size(), 3u + (all.size() - names.size()));
  EXPECT_TRUE(in_flight_verified) << "the program in flight was not verified";
}

}  // namespace
}  // namespace ft
