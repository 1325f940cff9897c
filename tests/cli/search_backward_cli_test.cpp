// flytune search --pass backward on the CPU emulator (search/backward_search.hpp),
// through a `flytune worker` process as on a GPU:
// a tiny layer (E = 4, H = I = 64, top-2), one configuration per role
// (--space small --budget 1), T = 1 and 7; the backward program verified
// against the CPU backward and timed, its layer winners recorded with pass
// backward and shown by `flytune db winners`; a second run measures nothing
// again. The refusals, one line each.
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using test::run_flytune;

// The test's search; `shape` and `space` replace the tiny layer's shape and the space.
std::vector<std::string> search_args(const std::string& db, std::vector<std::string> shape = {"--hidden", "64", "--inter", "64"},
                                     const std::string& space = "small", const std::string& pass = "backward") {
  std::vector<std::string> a{"search", "--emulate", "--target", "gfx942", "--experts", "4", "--topk", "2", "--pass",
                             pass, "--space", space, "--budget", "1", "--tokens", "1,7", "--seed", "5", "--db", db, "--json"};
  a.insert(a.end(), shape.begin(), shape.end());
  return a;
}

nlohmann::json parsed(const ProcessOutput& r) {
  auto j = nlohmann::json::parse(r.output, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.output;
  return j;
}

// Measured by a worker process (the default) or by the service in the search's own (--in-process).
class SearchBackwardBy : public ::testing::TestWithParam<const char*> {};

TEST_P(SearchBackwardBy, RecordsBackwardWinnersAndResumes) {
  test::ScratchDir dir;
  const std::string db = dir.file("bw.db");
  const auto args = [&] {
    std::vector<std::string> a = search_args(db);
    if (*GetParam()) a.push_back(GetParam());
    return a;
  };
  auto first = run_flytune(args());
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const nlohmann::json s = parsed(first);
  // One program (one configuration per role): verified once, timed at T = 1 and 7.
  EXPECT_EQ(s["measurements"], 3) << s.dump(2);
  EXPECT_EQ(s["resumed"], 0);
  ASSERT_EQ(s["gpus"].size(), 1u) << s.dump(2);
  EXPECT_EQ(s["gpus"][0]["device"], "emu:gfx942");
  EXPECT_EQ(s["gpus"][0]["crashes"], 0);
  EXPECT_EQ(s["gpus"][0]["verified"], 1);
  ASSERT_EQ(s["winners"].size(), 2u) << s.dump(2);
  for (std::size_t i = 0; i < 2; ++i) {
    const nlohmann::json& w = s["winners"][i];
    EXPECT_EQ(w["tokens"], i == 0 ? 1 : 7);
    EXPECT_EQ(w["pass"], "backward");
    EXPECT_EQ(w["kind"], "layer");
    EXPECT_GT(w["median_us"].get<double>(), 0.0);
    // The program's name: its four roles' configurations, dgrad2 first.
    EXPECT_TRUE(w["kernel"].get<std::string>().starts_with("ft_gfx942_dgrad2_bf16_")) << w["kernel"];
    EXPECT_NE(w["kernel"].get<std::string>().find("+ft_gfx942_kgrouped_bf16_"), std::string::npos) << w["kernel"];
    // Where its time goes: the support steps and each GEMM role, timed between the steps.
    ASSERT_TRUE(w.contains("stages")) << w.dump(2);
    for (const char* part : {"support_us", "dgrad2_us", "dgrad1_us", "wgrad2_us", "wgrad1_us"})
      EXPECT_TRUE(w["stages"].contains(part) && w["stages"][part].get<double>() >= 0.0) << part << ": " << w.dump(2);
  }
  const auto measured = test::measurements(db);
  ASSERT_EQ(measured.size(), 3u);
  EXPECT_EQ(measured[0].phase, "verify");
  EXPECT_EQ(measured[0].status, db::MeasurementStatus::ok);
  EXPECT_TRUE(measured[0].rel_l2_err.has_value());

  struct View {
    std::vector<std::string> filter;
    std::size_t rows;
  };
  for (const View& v : std::vector<View>{{{}, 2}, {{"--pass", "backward"}, 2}, {{"--pass", "forward"}, 0}}) {
    std::vector<std::string> args{"db", "--db", db, "--json", "winners"};
    args.insert(args.end(), v.filter.begin(), v.filter.end());
    auto w = run_flytune(args);
    ASSERT_EQ(w.exit_code, 0) << w.output;
    const nlohmann::json rows = parsed(w);
    ASSERT_EQ(rows.size(), v.rows) << w.output;
    for (const auto& r : rows) EXPECT_EQ(r["pass"], "backward");
  }
  auto table = run_flytune({"db", "--db", db, "winners"});
  EXPECT_NE(table.output.find("backward  layer"), std::string::npos) << table.output;

  auto again = run_flytune(args());
  ASSERT_EQ(again.exit_code, 0) << again.output;
  const nlohmann::json r = parsed(again);
  EXPECT_EQ(r["measurements"], 0) << r.dump(2);
  EXPECT_EQ(r["resumed"], 3);
  EXPECT_EQ(r["winners"].size(), 2u);
  for (const auto& w : r["winners"]) EXPECT_FALSE(w.contains("stages")) << "a resumed timing has no parts: " << w.dump(2);
  EXPECT_EQ(test::measurements(db).size(), 3u);
}

// --json prints the summary alone; --progress adds the search's lines on stderr (a log of a long
// backward search: what it compiled, each program's verdict, each timing with the ETA).
TEST(SearchBackward, ProgressWithJsonOnlyWhenAsked) {
  test::ScratchDir dir;
  const std::vector<std::string> quiet = search_args(dir.file("quiet.db"));
  auto q = run_flytune(quiet);
  ASSERT_EQ(q.exit_code, 0) << q.output;
  EXPECT_FALSE(parsed(q).is_discarded());
  EXPECT_EQ(q.output.find("backward verify"), std::string::npos) << q.output;
  std::vector<std::string> loud = search_args(dir.file("loud.db"));
  loud.push_back("--progress");
  auto l = run_flytune(loud);
  ASSERT_EQ(l.exit_code, 0) << l.output;
  for (const char* line : {"backward compile dgrad2: 1 configurations", "backward compile wgrad1", "backward verify ",
                           "backward time T=1", "backward time T=7"})
    EXPECT_NE(l.output.find(line), std::string::npos) << line << " in\n" << l.output;
}

INSTANTIATE_TEST_SUITE_P(SearchBackward, SearchBackwardBy, ::testing::Values("", "--in-process"),
                         [](const auto& info) { return *info.param ? std::string("InProcess") : std::string("Worker"); });

TEST(SearchBackward, RefusesWhatItCannotRunInOneLine) {
  test::ScratchDir dir;
  const std::string db = dir.file("refused.db");
  const std::vector<std::string> tiny{"--hidden", "64", "--inter", "64"};
  struct Case {
    std::vector<std::string> args;
    const char* says;
  };
  const std::vector<Case> cases{
      {search_args(db, {"--hidden", "128", "--inter", "128", "--dtype", "fp8"}), "fp8 problems have no backward kernels"},
      {search_args(db, tiny, "small;tile_m=64"), "takes a preset --space"},
      {search_args(db, tiny, "small", "sideways"), "--pass"},
  };
  for (const Case& c : cases) {
    auto r = run_flytune(c.args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << r.output;
  }
  // No device: a search without a GPU is a dry run, which measures nothing.
  auto gpu = run_flytune({"search", "--pass", "backward", "--target", "gfx942", "--db", db});
  EXPECT_EQ(gpu.exit_code, 2) << gpu.output;
  EXPECT_NE(gpu.output.find("--dry-run only compiles"), std::string::npos) << gpu.output;
  // Several devices: the backward measures on one.
  std::vector<std::string> two = search_args(db);
  two.insert(two.end(), {"--devices", "emu:gfx942:0,emu:gfx942:1"});
  auto several = run_flytune(two);
  EXPECT_EQ(several.exit_code, 2) << several.output;
  EXPECT_NE(several.output.find("measures on one device in this version"), std::string::npos) << several.output;
}

}  // namespace
}  // namespace ft
