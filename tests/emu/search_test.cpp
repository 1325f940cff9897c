// flytune search --emulate: the whole search -- compile (Backend::emulate),
// verify, time, pair stages into layers, record winners -- with its worker on
// the CPU emulator (emu:<target>), run as the real binary. Also: a search
// killed with SIGKILL mid-way resumes without measuring again, and the
// database it ends with exports and passes check-export --emulate; worker
// selectors emu:<target>[:<n>] open, malformed ones fail with one line. And
// the same whole search through the in-process measurer (run_search with
// in_process: the measuring service called in this process, no worker).
// While the whole search runs, flytune export reads the same database over
// and over: each export is complete or refused with one line.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>
#include <tuple>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "generator/problem.hpp"
#include "generator/space.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/support/scoped_env.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "search/search.hpp"
#include "measure/worker/protocol.hpp"

extern char** environ;

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace std::chrono_literals;

// A small space: two cheap tiles of each stage on sm_90a (mma.sync, 128
// threads, 32 rows, no split-K), one bucket, on the emulator's problem (tiny:
// E = 4, k = 2) with H = 64 and I = 128 instead of 256 and 512: the protocol
// launches each candidate some 50 times, and a launch of this problem costs
// the emulator a fifth of tiny's (issue 50; what is checked here does not
// depend on the size). The whole search adds the default variants (the
// speedup baseline); the killed one leaves them out to stay short.
constexpr const char* kTarget = "sm_90a";
constexpr const char* kSpace = "small;atom=mma_m16n8k16_f32_bf16;split_k=1;tile_m=32;tile_n=32,64";
constexpr int kHidden = 64, kInter = 128;
const std::vector<int> kTokens{1};

// Emulated libraries built once are reused by every test here and by later runs.
std::string shared_cache() { return std::string(FT_EMU_TEST_CACHE) + "/search"; }

std::vector<std::string> search_args(const std::string& db, bool baseline = true) {
  std::vector<std::string> args{"search", "--emulate", "--target", kTarget, "--space", kSpace,
                                "--hidden", std::to_string(kHidden), "--inter", std::to_string(kInter),
                                "--tokens", "1", "--seed", "7", "--db", db, "--json"};
  if (!baseline) args.push_back("--no-baseline");
  return args;
}

// The JSON summary at the end of `search --json` output (warnings may precede it).
json summary_of(const std::string& output) {
  const auto at = output.find("\n{") != std::string::npos ? output.find("\n{") + 1 : output.find('{');
  if (at == std::string::npos) return json();
  return json::parse(output.substr(at), nullptr, false);
}

db::Store open_db(const std::string& path) {
  auto s = db::Store::open(path, db::OpenMode::read_only);
  EXPECT_TRUE(s) << s.error().describe();
  return std::move(*s);
}

using test::measurements;

// What every emulated search database must hold: the emulator as the device,
// the host compiler as the toolchain, host libraries as code objects, no
// resource numbers (said why), verified and timed variants, and per bucket a
// winner of each stage and of the layer whose numbers came from measurements.
void expect_emulated_search_recorded(const std::string& path) {
  db::Store s = open_db(path);
  auto devices = s.devices();
  ASSERT_TRUE(devices);
  ASSERT_EQ(devices->size(), 1u);
  const db::DeviceRecord& dev = devices->front();
  EXPECT_EQ(dev.runtime, "emu");
  EXPECT_EQ(dev.arch, kTarget);
  EXPECT_EQ(dev.name, "flytune CPU emulator (sm_90a)");

  auto toolchains = s.toolchains();
  ASSERT_TRUE(toolchains);
  ASSERT_EQ(toolchains->size(), 1u);
  EXPECT_EQ(toolchains->front().backend, "emulate");
  EXPECT_FALSE(toolchains->front().version.empty());
  EXPECT_NE(toolchains->front().version, "host compiler");  // the compiler's own --version line

  auto variants = s.variants();
  ASSERT_TRUE(variants);
  std::size_t stage_variants = 0;
  for (const db::VariantRecord& v : *variants) {
    if (v.kind == "layer") continue;
    SCOPED_TRACE(v.kernel_name);
    EXPECT_EQ(v.compile_status, db::CompileStatus::ok);
    ASSERT_FALSE(v.code_object_hash.empty());
    auto format = s.code_object_format(v.code_object_hash);
    ASSERT_TRUE(format && *format);
    EXPECT_EQ(**format, "so");
    auto bytes = s.code_object(v.code_object_hash);
    ASSERT_TRUE(bytes && *bytes);
    ASSERT_GT((*bytes)->size(), 4u);
    EXPECT_EQ(std::string(reinterpret_cast<const char*>((*bytes)->data()) + 1, 3), "ELF");
    // No faked resources: the columns are empty and the log says why.
    EXPECT_FALSE(v.resources.regs || v.resources.lds_bytes || v.resources.occupancy || v.resources.spills);
    EXPECT_NE(v.compile_log.find("not analysed: an emulated build is a host library"), std::string::npos) << v.compile_log;
    stage_variants += v.kind != "support";
  }
  EXPECT_GE(stage_variants, 4u);

  auto ms = s.measurements();
  ASSERT_TRUE(ms);
  std::map<std::string, int> ok_by_phase;
  for (const db::MeasurementRecord& m : *ms) {
    EXPECT_EQ(m.pci_bus_id, "emu:sm_90a:0");
    if (m.status != db::MeasurementStatus::ok) continue;
    ++ok_by_phase[m.phase];
    if (m.phase == "verify") {
      ASSERT_TRUE(m.rel_l2_err);
      EXPECT_LE(*m.rel_l2_err, 8e-3);
      EXPECT_EQ(m.tokens, 333);
    } else {
      ASSERT_TRUE(m.median_us && m.p10_us && m.p90_us) << m.phase;
      EXPECT_GT(*m.median_us, 0);
      EXPECT_LE(*m.p10_us, *m.median_us);
      EXPECT_LE(*m.median_us, *m.p90_us);
      EXPECT_GT(m.samples, 0);
    }
  }
  EXPECT_GE(ok_by_phase["verify"], 4);
  EXPECT_GT(ok_by_phase["short"], 0);
  EXPECT_GT(ok_by_phase["long"], 0);
  EXPECT_GT(ok_by_phase["ab"], 0);
  std::set<int> layer_timed;
  for (const db::MeasurementRecord& m : *ms)
    if (m.phase == "layer" && m.status == db::MeasurementStatus::ok) layer_timed.insert(m.tokens);
  EXPECT_EQ(layer_timed, std::set<int>(kTokens.begin(), kTokens.end()));

  auto winners = s.winners();
  ASSERT_TRUE(winners);
  std::set<std::pair<int, std::string>> seen;
  for (const db::WinnerRow& w : *winners) {
    SCOPED_TRACE(w.variant.kernel_name);
    seen.emplace(w.winner.tokens, w.winner.kind);
    EXPECT_GT(w.winner.median_us, 0);
    ASSERT_TRUE(w.winner.p10_us && w.winner.p90_us);
    EXPECT_LE(*w.winner.p10_us, w.winner.median_us);
    EXPECT_LE(w.winner.median_us, *w.winner.p90_us);
    if (w.winner.kind == "layer") {
      // The layer winner is the pair verified at the bucket's T and timed at length.
      db::MeasurementFilter f;
      f.variant_id = w.variant.id;
      f.tokens = w.winner.tokens;
      auto lm = s.measurements(f);
      ASSERT_TRUE(lm);
      bool timed = false;
      for (const db::MeasurementRecord& m : *lm)
        if (m.phase == "layer" && m.status == db::MeasurementStatus::ok) {
          timed = true;
          EXPECT_DOUBLE_EQ(*m.median_us, w.winner.median_us);
          ASSERT_TRUE(m.rel_l2_err);
          EXPECT_LE(*m.rel_l2_err, 8e-3);
        }
      EXPECT_TRUE(timed);
      EXPECT_TRUE(w.variant.params.contains("stage1_kernel") && w.variant.params.contains("stage2_kernel"));
    }
  }
  for (int t : kTokens)
    for (const char* kind : {"moe1", "moe2", "layer"}) EXPECT_TRUE(seen.contains({t, kind})) << "T=" << t << " " << kind;
}

// flytune export on the database while the search writes it (a server's
// deploy job beside a tuning run): each export either writes a complete
// export of the winners recorded by then or refuses with one line (exit 1:
// no database yet, no layer winner yet); never a database lock, a partial
// folder or another exit code. Returns how many wrote an export.
int export_while(const std::string& db, const std::string& scratch, const std::atomic<bool>& searching) {
  int written = 0;
  for (int i = 0; searching.load(); ++i) {
    const std::string out = scratch + "/during-" + std::to_string(i);
    auto e = test::run_flytune({"export", "--db", db, "--out", out, "--check", "none"});
    EXPECT_TRUE(e.exit_code == 0 || e.exit_code == 1) << e.exit_code << ": " << e.output;
    EXPECT_EQ(e.output.find("locked"), std::string::npos) << e.output;
    EXPECT_EQ(e.output.find("busy"), std::string::npos) << e.output;
    if (e.exit_code == 0) {
      std::ifstream mf(out + "/manifest.json");
      const json m = json::parse(mf, nullptr, false);
      EXPECT_TRUE(m.is_object() && m["problems"].size() == 1u) << e.output;
      for (const json& b : m.value("problems", json::array()).at(0).value("buckets", json::array()))
        for (const json& st : b["steps"])
          if (st.contains("code_object")) { EXPECT_TRUE(fs::exists(out + "/" + st["code_object"].get<std::string>())); }
      ++written;
    } else {
      EXPECT_FALSE(fs::exists(out + "/manifest.json")) << "a refused export left a manifest: " << e.output;
    }
    std::this_thread::sleep_for(500ms);
  }
  return written;
}

TEST(EmuSearch, WholeSearchVerifiesTimesPairsAndRecordsWinners) {
  test::ScratchDir dir;
  const test::ScopedEnv cache("FLYTUNE_CACHE_DIR", shared_cache().c_str());
  const std::string db = dir.file("emu.db");
  std::atomic<bool> searching{true};
  ProcessOutput r;
  std::thread search([&] {
    r = test::run_flytune(search_args(db));
    searching = false;
  });
  const int written = export_while(db, dir.file(""), searching);
  search.join();
  std::printf("%d exports written while the search ran\n", written);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json sum = summary_of(r.output);
  ASSERT_TRUE(sum.is_object()) << r.output;
  EXPECT_EQ(sum["device"], "flytune CPU emulator (sm_90a) (sm_90a)");
  EXPECT_EQ(sum["interrupted"], false);
  // One run: nothing from earlier work. The search reuses its own rows only
  // for each kind's default variant, timed at length for the speedup when the
  // strategy already did so.
  EXPECT_LE(sum["resumed"].get<std::size_t>(), 2 * kTokens.size());
  ASSERT_EQ(sum["targets"].size(), 1u);
  EXPECT_EQ(sum["targets"][0]["backend"], "emulate");
  EXPECT_EQ(sum["targets"][0]["pruned"], 0);
  EXPECT_EQ(sum["targets"][0]["verify_failed"], 0);
  EXPECT_EQ(sum["targets"][0]["crashed"], 0);
  EXPECT_EQ(sum["winners"].size(), kTokens.size() * 3);
  EXPECT_GT(sum["targets"][0]["defaults_added"].get<int>(), 0);
  for (const json& w : sum["winners"])  // each stage winner against the default variant, timed alike
    if (w["kind"] != "layer") { EXPECT_GT(w.value("speedup_vs_default", 0.0), 0.0) << w.dump(); }
  const auto ms = measurements(db);
  EXPECT_EQ(sum["measurements"].get<std::size_t>(), ms.size());
  // One run: each bucket's layer winner timed at length once.
  EXPECT_EQ(std::count_if(ms.begin(), ms.end(), [](const auto& m) { return m.phase == "layer"; }), std::ptrdiff_t(kTokens.size()));
  expect_emulated_search_recorded(db);
}

// The whole search with the measuring service in this process
// (make_in_process_measurer on emu:sm_90a): no worker is started -- the
// worker executable named does not exist -- and the search verifies, times,
// pairs the layer and records winners as the subprocess search does.
TEST(EmuSearch, InProcessMeasurerRunsTheWholeSearch) {
  test::ScratchDir dir;
  SearchConfig cfg;
  cfg.problem = *problem_from_preset("tiny");
  cfg.problem.hidden = kHidden;
  cfg.problem.inter = kInter;
  cfg.problem.name = "custom";  // as --hidden, --inter name it
  cfg.targets = {kTarget};
  cfg.devices = {std::string("emu:") + kTarget};
  cfg.tokens = kTokens;
  cfg.space = *SpaceOptions::parse(kSpace);
  cfg.compile.backend = Backend::emulate;
  cfg.compile.cache_dir = shared_cache();
  cfg.in_process = true;
  cfg.worker_executable = dir.file("no-such-worker");
  cfg.db_path = dir.file("in-process.db");
  cfg.seed = 7;
  cfg.progress = false;
  auto s = run_search(cfg);
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_EQ(s->device, "flytune CPU emulator (sm_90a) (sm_90a)");
  EXPECT_FALSE(s->interrupted);
  ASSERT_EQ(s->targets.size(), 1u);
  EXPECT_EQ(s->targets[0].backend, "emulate");
  EXPECT_EQ(s->targets[0].verify_failed, 0u);
  EXPECT_EQ(s->targets[0].crashed, 0u);
  EXPECT_GE(s->targets[0].verified, 4u);
  ASSERT_EQ(s->gpus.size(), 1u);
  EXPECT_EQ(s->gpus[0].crashes, 0u);
  EXPECT_EQ(s->gpus[0].buckets, kTokens);
  ASSERT_EQ(s->winners.size(), kTokens.size() * 3);
  for (const BucketResult& w : s->winners) {
    EXPECT_GT(w.median_us, 0) << w.kernel;
    if (w.kind != "layer") {
      EXPECT_GT(w.speedup_vs_default.value_or(0), 0) << w.kernel;
    } else {
      EXPECT_NE(w.kernel.find('+'), std::string::npos) << w.kernel;  // a stage pair
    }
  }
  const auto ms = measurements(cfg.db_path);
  EXPECT_EQ(s->measurements, ms.size());
  EXPECT_EQ(std::count_if(ms.begin(), ms.end(), [](const auto& m) { return m.phase == "layer"; }),
            std::ptrdiff_t(kTokens.size()));
  expect_emulated_search_recorded(cfg.db_path);
  // The run says it measured in process.
  auto runs = open_db(cfg.db_path).list_runs();
  ASSERT_TRUE(runs && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, db::RunStatus::finished);
  EXPECT_EQ(runs->front().options.value("in_process", false), true) << runs->front().options.dump();
}

// Killed with SIGKILL once it has verified everything and timed some
// variants, the search cannot mark its run; the same command again closes
// that run, takes what it measured from the database instead of measuring it
// again, and finishes with winners. That database exports, and the export's
// own libraries pass check-export on the emulator.
TEST(EmuSearch, KilledSearchResumesThenExportsAndChecks) {
  test::ScratchDir dir;
  const test::ScopedEnv cache("FLYTUNE_CACHE_DIR", shared_cache().c_str());
  const std::string tmp = dir.file("tmp");
  fs::create_directories(tmp);
  const test::ScopedEnv tmpdir("TMPDIR", tmp.c_str());  // the searches' object folders, to look at
  const std::string db = dir.file("killed.db");

  const pid_t pid = test::spawn_flytune(search_args(db, false), dir.file("first.log"));
  ASSERT_GT(pid, 0);
  // Wait for verification to be done and timing to have begun.
  const auto deadline = std::chrono::steady_clock::now() + 240s;
  bool timing = false;
  int status = 0;
  while (!timing && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(200ms);
    ASSERT_EQ(waitpid(pid, &status, WNOHANG), 0) << "the search ended before it was killed:\n"
                                                 << test::read_bytes(dir.file("first.log"));
    if (!fs::exists(db)) continue;
    auto s = db::Store::open(db, db::OpenMode::read_only);
    if (!s) continue;  // not yet migrated
    db::MeasurementFilter f;
    auto ms = s->measurements(f);
    if (!ms) continue;
    int shorts = 0;
    for (const auto& m : *ms) shorts += m.phase == "short";
    timing = shorts >= 2;
  }
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(timing) << "no timing within the deadline:\n" << test::read_bytes(dir.file("first.log"));
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(fs::exists(tmp + "/flytune-objects-" + std::to_string(pid))) << "the killed search left its objects";

  const std::vector<db::MeasurementRecord> before = measurements(db);
  std::size_t verified_before = 0;
  for (const auto& m : before) verified_before += m.phase == "verify";
  ASSERT_GE(verified_before, 4u);
  {
    auto runs = open_db(db).list_runs();
    ASSERT_TRUE(runs);
    ASSERT_EQ(runs->size(), 1u);
    EXPECT_EQ(runs->front().status, db::RunStatus::running);  // killed: nobody could mark it
  }

  auto r = test::run_flytune(search_args(db, false));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json sum = summary_of(r.output);
  ASSERT_TRUE(sum.is_object()) << r.output;
  // Everything run 1 verified or timed short/long came from the database.
  std::size_t resumable = 0;
  for (const auto& m : before) resumable += m.phase == "verify" || m.phase == "short" || m.phase == "long";
  EXPECT_GE(sum["resumed"].get<std::size_t>(), resumable) << sum.dump(2);
  EXPECT_EQ(sum["interrupted"], false);
  bool noted = false;
  for (const auto& n : sum["notes"]) noted = noted || n.get<std::string>().find("run 1 was left 'running'") != std::string::npos;
  EXPECT_TRUE(noted) << sum["notes"].dump();
  EXPECT_FALSE(fs::exists(tmp + "/flytune-objects-" + std::to_string(pid))) << "the rerun removes a dead search's objects";

  {
    auto runs = open_db(db).list_runs();
    ASSERT_TRUE(runs);
    ASSERT_EQ(runs->size(), 2u);
    EXPECT_EQ((*runs)[0].status, db::RunStatus::interrupted);
    EXPECT_EQ((*runs)[1].status, db::RunStatus::finished);
  }
  // Nothing verified or timed short/long twice (ab rounds and layers are
  // re-timed together by design).
  std::map<std::tuple<std::int64_t, int, std::string>, int> count;
  const auto after = measurements(db);
  for (const auto& m : after)
    if (m.phase == "verify" || m.phase == "short" || m.phase == "long") ++count[{m.variant_id, m.tokens, m.phase}];
  for (const auto& [key, n] : count)
    EXPECT_EQ(n, 1) << "variant " << std::get<0>(key) << " T=" << std::get<1>(key) << " " << std::get<2>(key);
  std::size_t verified_again = 0;
  for (const auto& m : measurements(db, 2)) verified_again += m.phase == "verify";
  EXPECT_EQ(verified_again, 0u);
  EXPECT_EQ(sum["measurements"].get<std::size_t>(), after.size() - before.size());
  expect_emulated_search_recorded(db);

  // The database exports (host libraries, format so) and the export passes
  // check-export on the emulator, running its own files.
  const std::string out = dir.file("export");
  // --check auto runs an export of host libraries on the emulator before writing it.
  auto e = test::run_flytune({"export", "--db", db, "--out", out, "--check-routing", "uniform"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find("checked through the runtime on CPU emulator (sm_90a)"), std::string::npos) << e.output;
  std::ifstream mf(out + "/manifest.json");
  const json manifest = json::parse(mf, nullptr, false);
  ASSERT_TRUE(manifest.is_object());
  EXPECT_EQ(manifest["code_object_format"], "so");
  EXPECT_EQ(manifest["toolchain"]["backend"], "emulate");
  EXPECT_EQ(manifest["device"]["runtime"], "emu");
  ASSERT_EQ(manifest["problems"].size(), 1u);
  EXPECT_EQ(manifest["problems"][0]["buckets"].size(), kTokens.size());
  std::size_t libraries = 0;
  for (const auto& f : fs::directory_iterator(out)) libraries += f.path().extension() == ".so";
  EXPECT_GE(libraries, 2u);

  auto c = test::run_flytune({"check-export", "--emulate", out});
  EXPECT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("ok"), std::string::npos) << c.output;
  EXPECT_EQ(c.output.find("FAIL"), std::string::npos) << c.output;
  // Its own host libraries ran, and the summary does not say otherwise.
  EXPECT_EQ(c.output.find("rebuilt for the emulator"), std::string::npos) << c.output;
}

// The worker opens emu:<target> and emu:<target>:<n> as that target's
// emulator, numbered; malformed selectors are one usage line, exit 2.
TEST(EmuWorker, EmuSelectorsOpenAndBadOnesFailWithOneLine) {
  const std::string device_request = protocol::to_line(protocol::encode(protocol::DeviceRequest{})) + "\n";
  struct Case {
    const char* selector;
    const char* arch;
    const char* bus;
  };
  for (const Case& c : {Case{"emu:sm_90a", "sm_90a", "emu:sm_90a:0"}, Case{"emu:gfx942:1", "gfx942", "emu:gfx942:1"},
                        Case{"emu:gfx950:12", "gfx950", "emu:gfx950:12"}}) {
    SCOPED_TRACE(c.selector);
    auto r = test::run_flytune({"worker", "--device", c.selector}, device_request);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    auto message = protocol::parse_line(r.output.substr(0, r.output.find('\n')));
    ASSERT_TRUE(message) << r.output;
    auto answer = protocol::decode_answer<protocol::DeviceAnswer>(*message);
    ASSERT_TRUE(answer) << answer.error().describe() << "\n" << r.output;
    EXPECT_EQ(answer->protocol, protocol::kVersion);
    EXPECT_EQ(answer->device.runtime, "emu");
    EXPECT_EQ(answer->device.arch, c.arch);
    EXPECT_EQ(answer->device.name, std::string("flytune CPU emulator (") + c.arch + ")");
    EXPECT_EQ(answer->device.pci_bus_id, c.bus);
  }
  for (const char* bad : {"emu", "emu:", "emu:gfx999", "emu:sm_90a:", "emu:sm_90a:x", "emu:sm_90a:-1", "emu:sm_90a:1:2",
                          "emu::0", "tpu:0", "cuda:x"}) {
    SCOPED_TRACE(bad);
    auto r = test::run_flytune({"worker", "--device", bad}, device_request);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(r.output.starts_with("flytune: error: --device: bad device '")) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    const bool emu = std::string_view(bad).starts_with("emu");
    EXPECT_NE(r.output.find(emu ? "expected emu:<target> or emu:<target>:<n>" : "emu:<target>"), std::string::npos)
        << r.output;
  }
}

// search --emulate refuses contradicting options with one usage line, before any work.
TEST(EmuSearch, ContradictingOptionsAreUsageErrors) {
  test::ScratchDir dir;
  const std::string db = dir.file("none.db");
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"search", "--emulate", "--db", db},
        std::vector<std::string>{"search", "--emulate", "--target", "sm_90a", "--dry-run", "--db", db},
        std::vector<std::string>{"search", "--emulate", "--target", "sm_90a", "--device", "cuda:0", "--db", db},
        std::vector<std::string>{"search", "--device", "emu:gfx942", "--target", "sm_90a", "--db", db},
        std::vector<std::string>{"search", "--emulate", "--target", "sm_90a", "--target", "gfx942", "--db", db},
        std::vector<std::string>{"search", "--device", "emu:gfx999", "--db", db},
        std::vector<std::string>{"search", "--device", "npu:1", "--db", db}}) {
    auto r = test::run_flytune(args);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(r.output.starts_with("flytune: error: ")) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    EXPECT_FALSE(fs::exists(db)) << "a usage error writes nothing";
  }
}

}  // namespace
}  // namespace ft
