// What a new user and a tester hit with wrong inputs (issue 15): every bad
// value is refused with one line that names it (escaped, shortened), with exit
// code 2 for a bad option value and 1 for a bad file; nothing hangs; library
// and cache paths from the environment are strict.
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using test::run_flytune;
using test::ScratchDir;

std::size_t lines(const std::string& text) {
  std::size_t n = 0;
  for (char c : text) n += c == '\n' ? 1 : 0;
  return n;
}

// flytune with extra environment variables, and a time limit.
ProcessOutput run_with_env(std::vector<std::string> env, std::vector<std::string> args,
                           std::chrono::seconds limit = std::chrono::seconds(300)) {
  std::vector<std::string> argv{"/usr/bin/env"};
  argv.insert(argv.end(), env.begin(), env.end());
  argv.push_back(FLYTUNE_BIN);
  argv.insert(argv.end(), args.begin(), args.end());
  auto r = run_capture(argv, {}, limit);
  if (!r) return ProcessOutput{-1, 0, false, r.error().describe()};
  return *r;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

struct Refusal {
  std::vector<std::string> args;
  int exit_code;
  std::string expected;  // part of the one error line
};

class Refusals : public ::testing::TestWithParam<Refusal> {};

TEST_P(Refusals, OneLineNamingTheValue) {
  ScratchDir dir;
  std::vector<std::string> args = GetParam().args;
  for (auto& a : args)
    if (a == "OUT") a = dir.file("out");
  auto r = run_flytune(args);
  EXPECT_EQ(r.exit_code, GetParam().exit_code) << r.output;
  EXPECT_NE(r.output.find(GetParam().expected), std::string::npos) << r.output;
  EXPECT_LE(r.output.size(), 400u) << "a shortened value, not a 300-digit number:\n" << r.output;
  EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
}

const std::string k300(300, '9');

INSTANTIATE_TEST_SUITE_P(
    Issue15, Refusals,
    ::testing::Values(
        // The same kind of bad value exits 2, whichever option it is.
        Refusal{{"generate", "--target", "gfx942", "--out", "OUT", "--space", "bogus"}, 2, "'bogus' is neither a preset"},
        Refusal{{"search", "--dry-run", "--strategy", "bogus"}, 2, "unknown strategy 'bogus'; use halving, exhaustive, random or model"},
        Refusal{{"search", "--dry-run", "--in-process"}, 2, "--in-process measures and --dry-run only compiles"},
        Refusal{{"generate", "--target", "gfx9000", "--out", "OUT"}, 2, "unknown target 'gfx9000'"},
        Refusal{{"generate", "--target", "gfx942", "--out", "OUT", "--problem", "llama"}, 2, "unknown problem 'llama'"},
        Refusal{{"generate", "--target", "gfx942", "--out", "OUT", "--dtype", "fp4"}, 2, "unknown dtype 'fp4'"},
        Refusal{{"generate", "--target", "gfx942", "--out", "OUT", "--routing", "zipf:nan"}, 2, "finite exponent"},
        Refusal{{"generate", "--target", "gfx942", "--out", "OUT", "--routing", "zipf:inf"}, 2, "finite exponent"},
        Refusal{{"generate", "--target", "gfx942", "--out", "OUT", "--experts", "0"}, 2, "experts must be 1..1024"},
        // Token lists: the limit is named, the whole list quoted.
        Refusal{{"verify", "--emulate", "--target", "gfx942", "--tokens", "16777217"}, 2, "limit of 16777216 (2^24)"},
        Refusal{{"verify", "--emulate", "--target", "gfx942", "--tokens", "1,,2"}, 2, "token list '1,,2': an empty entry"},
        Refusal{{"verify", "--emulate", "--target", "gfx942", "--tokens", k300}, 2, "(300 characters)"},
        // Numbers: negative, infinite, and ranges said in words.
        Refusal{{"search", "--dry-run", "--budget", "-5"}, 2, "--budget: must be 0 or more"},
        Refusal{{"search", "--dry-run", "--time-limit", "-1"}, 2, "--time-limit: must be 0 or more seconds"},
        Refusal{{"search", "--dry-run", "--time-limit", "inf"}, 2, "--time-limit: must be a finite number"},
        Refusal{{"search", "--dry-run", "--seed", "-1"}, 2, "--seed: must be 0 or more"},
        Refusal{{"search", "--dry-run", "--ceilings", "inf,inf"}, 2, "--ceilings: 'inf,inf' is not TFLOPS,TBPS"},
        Refusal{{"db", "variants", "--limit", "-1"}, 2, "--limit: must be 0 or more"},
        Refusal{{"db", "winners", "--tokens", k300}, 2, "--tokens: is too large"},
        // Unknown words are named, with the choices.
        Refusal{{"--frob"}, 2, "unknown option '--frob'; flytune takes a command first: targets, db, report"},
        Refusal{{"frobnicate"}, 2, "unknown command 'frobnicate'"},
        Refusal{{"db", "nosuch"}, 2, "db: unknown view 'nosuch'; 'flytune db' shows one of: runs, winners, stats"},
        Refusal{{"db"}, 2, "db: name what to show: runs, winners"},
        // GPUs named for a search on several (issue 20).
        Refusal{{"search", "--devices", "cuda:0,cuda:0"}, 2, "--devices names cuda:0 twice"},
        Refusal{{"search", "--devices", "cuda:0,gpu1"}, 2, "--devices: 'gpu1' is not a GPU"},
        Refusal{{"search", "--devices", "cuda:0,"}, 2, "--devices: '' is not a GPU"},
        Refusal{{"search", "--devices", "cuda:x"}, 2, "--devices: 'cuda:x' is not a GPU"},
        Refusal{{"search", "--device", "cuda:0", "--devices", "cuda:1"}, 2, "--device and --devices name the GPUs twice"},
        Refusal{{"search", "--allow-mixed"}, 2, "--allow-mixed needs --devices"},
        // A database in a folder that does not exist.
        Refusal{{"search", "--dry-run", "--target", "gfx942", "--db", "nodir/x.db"}, 1,
                "nodir/x.db: the folder 'nodir' does not exist"}));

TEST(InputErrors, ProblemFileValuesOutsideIntAreRefusedNotWrapped) {
  ScratchDir dir;
  const std::string file = dir.file("p.json");
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"experts", "4294967304"}, {"hidden", "4294971392"}, {"inter", "9223372036854775807"}, {"topk", "-4294967294"}}) {
    nlohmann::json j{{"experts", 8}, {"hidden", 4096}, {"inter", 14336}, {"topk", 2}};
    std::string text = j.dump();
    const auto at = text.find("\"" + key + "\":") + key.size() + 3;
    text.replace(at, text.find_first_of(",}", at) - at, value);
    write(file, text);
    auto r = run_flytune({"generate", "--target", "gfx942", "--out", dir.file("out"), "--problem", file});
    EXPECT_EQ(r.exit_code, 1) << text << "\n" << r.output;  // a bad file, not a bad option
    EXPECT_NE(r.output.find("\"" + key + "\" is " + value), std::string::npos) << r.output;
  }
}

TEST(InputErrors, AFifoProblemFileIsRefusedWithoutHanging) {
  ScratchDir dir;
  const std::string fifo = dir.file("problem.json");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto r = run_capture({FLYTUNE_BIN, "generate", "--target", "gfx942", "--out", dir.file("out"), "--problem", fifo}, {},
                       std::chrono::seconds(30));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->timed_out) << "flytune hung reading a FIFO";
  EXPECT_EQ(r->exit_code, 1) << r->output;
  EXPECT_NE(r->output.find("is not a regular file"), std::string::npos) << r->output;
}

TEST(InputErrors, NewlinesAndEscapeCodesInANameStayOnOneLine) {
  ScratchDir dir;
  auto r = run_flytune({"generate", "--target", "gfx9\n42\x1b[31m", "--out", dir.file("out")});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(lines(r.output), 1u) << r.output;
  EXPECT_NE(r.output.find("gfx9\\n42\\x1b[31m"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find('\x1b'), std::string::npos) << r.output;
}

TEST(InputErrors, AWrongNvrtcOrComgrPathIsAnErrorNamingTheVariable) {
  for (const char* var : {"FLYTUNE_NVRTC", "FLYTUNE_COMGR"}) {
    const std::string target = std::string(var) == "FLYTUNE_NVRTC" ? "sm_90a" : "gfx942";
    ScratchDir dir;
    // For gfx942 clang could build instead; take it away too, so the error shows.
    auto r = run_with_env({std::string(var) + "=/nonexistent/lib.so", "FLYTUNE_CLANG=/nonexistent/clang"},
                          {"compile", "--target", target, "--out", dir.file("out"), "--cache-dir", "none"});
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_NE(r.output.find(std::string(var) + "=/nonexistent/lib.so cannot be loaded"), std::string::npos) << r.output;
  }
}

TEST(InputErrors, ATargetIsNamedOnceInAnError) {
  auto r = run_with_env({"FLYTUNE_COMGR=/nonexistent/lib.so", "FLYTUNE_CLANG=/nonexistent/clang"},
                        {"search", "--dry-run", "--target", "gfx950", "--db", ScratchDir().file("x.db")});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gfx950"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("gfx950: gfx950:"), std::string::npos) << r.output;
}

TEST(InputErrors, AnUnusableCacheFolderIsAnErrorWhenNamedAndAWarningByDefault) {
  ScratchDir dir;
  write(dir.file("file"), "not a folder");
  const std::string bad = dir.file("file") + "/cache";
  auto named = run_flytune({"compile", "--target", "gfx942", "--out", dir.file("out"), "--cache-dir", bad});
  EXPECT_EQ(named.exit_code, 1) << named.output;
  EXPECT_NE(named.output.find("--cache-dir: " + bad + ": cannot create the compile cache folder"), std::string::npos)
      << named.output;
  auto by_env = run_with_env({"FLYTUNE_CACHE_DIR=" + bad},
                             {"compile", "--target", "gfx942", "--out", dir.file("out2"), "--space", "tile_m=7"});
  EXPECT_NE(by_env.output.find("flytune: warning: " + bad + ": cannot create the compile cache folder"),
            std::string::npos)
      << by_env.output;
}

TEST(InputErrors, VerifyWithoutAGpuPointsToEmulate) {
  auto devices = run_flytune({"devices", "--json"});
  auto j = nlohmann::json::parse(devices.output, nullptr, false);
  if (!j.is_discarded() && !j["devices"].empty()) GTEST_SKIP() << "a GPU is present";
  auto r = run_flytune({"verify", "--problem", "tiny"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("flytune verify --emulate --target"), std::string::npos) << r.output;
}

TEST(InputErrors, DevicesJsonLoadedAgreesWithTheText) {
  auto text = run_flytune({"devices"});
  auto json = run_flytune({"devices", "--json"});
  ASSERT_EQ(json.exit_code, 0) << json.output;
  auto j = nlohmann::json::parse(json.output, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << json.output;
  for (const auto& rt : j["runtimes"]) {
    const std::string library = rt.value("library", "");
    EXPECT_EQ(rt["loaded"].get<bool>(), !library.empty()) << rt.dump();
    if (!library.empty() && rt["gpus"] == 0) {
      EXPECT_NE(text.output.find(library + " loaded"), std::string::npos) << text.output;
    }
    EXPECT_TRUE(rt.contains("initialised")) << rt.dump();
  }
}

}  // namespace
}  // namespace ft
