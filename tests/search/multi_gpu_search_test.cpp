// The search on several GPUs, run against fake workers (fake_gpu_worker.cpp):
// the real search, compile and store, with made-up devices and timings. Each
// case is a GPU set and what should happen to the work and the winners.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "store/store.hpp"
#include "generator/problem.hpp"
#include "search/search.hpp"
#include "measure/worker/protocol.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;

struct Env {
  std::string name, value;
};

// Sets environment variables for one search (the workers inherit them).
class ScopedEnv {
 public:
  explicit ScopedEnv(std::initializer_list<Env> vars) : vars_(vars) {
    for (const Env& e : vars_) setenv(e.name.c_str(), e.value.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() {
    for (const Env& e : vars_) unsetenv(e.name.c_str());
  }

 private:
  std::vector<Env> vars_;
};

class MultiGpuSearch : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt_name();
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "state");
  }
  void TearDown() override { fs::remove_all(dir_); }

  static std::string fmt_name() {
    return std::string("flytune-multigpu-") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
           std::to_string(getpid());
  }

  SearchConfig config(const std::string& db, std::vector<std::string> devices) {
    SearchConfig cfg;
    cfg.problem = *problem_from_preset("tiny");
    cfg.tokens = {1, 4, 16, 33, 64, 256};
    cfg.db_path = (dir_ / db).string();
    cfg.space = *SpaceOptions::parse("small");
    cfg.compile.cache_dir = FT_TEST_CACHE_DIR;
    cfg.devices = std::move(devices);
    cfg.worker_executable = FT_FAKE_WORKER;
    cfg.seed = 11;
    cfg.progress = false;
    return cfg;
  }

  // (tokens, kind) -> winning kernel, for one device row of a database.
  static std::map<std::pair<int, std::string>, std::string> winners(const std::string& db, const std::string& model) {
    auto store = db::Store::open(db, db::OpenMode::read_only);
    EXPECT_TRUE(store) << store.error().describe();
    std::map<std::pair<int, std::string>, std::string> out;
    const auto rows = store->winners();
    EXPECT_TRUE(rows) << rows.error().describe();
    for (const db::WinnerRow& w : *rows)
      if (w.device.name == model) out[{w.winner.tokens, w.winner.kind}] = w.variant.kernel_name;
    return out;
  }

  // Measurements per GPU bus id.
  static std::map<std::string, int> by_gpu(const std::string& db) {
    auto store = db::Store::open(db, db::OpenMode::read_only);
    std::map<std::string, int> out;
    const auto rows = store->measurements();
    for (const db::MeasurementRecord& m : *rows) ++out[m.pci_bus_id];
    return out;
  }

  fs::path dir_;
};

TEST_F(MultiGpuSearch, TwoGpusShareTheWorkAndPickTheWinnersOfOne) {
  auto one = run_search(config("one.db", {"cuda:0"}));
  ASSERT_TRUE(one) << one.error().describe();
  auto two = run_search(config("two.db", {"cuda:0", "cuda:1"}));
  ASSERT_TRUE(two) << two.error().describe();

  EXPECT_EQ(two->device, "2x Fake H200 (sm_90a)");
  ASSERT_EQ(two->gpus.size(), 2u);
  std::set<int> buckets;
  std::size_t verified = 0;
  for (const GpuSummary& g : two->gpus) {
    EXPECT_FALSE(g.buckets.empty()) << g.selector << " searched no bucket";
    EXPECT_GT(g.verified, 0u) << g.selector << " verified nothing";
    EXPECT_EQ(g.crashes, 0u);
    for (int t : g.buckets) EXPECT_TRUE(buckets.insert(t).second) << "T=" << t << " searched twice";
    verified += g.verified;
  }
  EXPECT_EQ(buckets, std::set<int>({1, 4, 16, 33, 64, 256}));
  EXPECT_EQ(verified, two->targets.at(0).verified + two->targets.at(0).verify_failed);

  // The same made-up times on every GPU: the same winners, a layer for each bucket.
  const auto w1 = winners(one->db_path, "Fake H200"), w2 = winners(two->db_path, "Fake H200");
  EXPECT_EQ(w1, w2);
  for (int t : buckets) EXPECT_TRUE(w2.contains({t, "layer"})) << "no layer winner at T=" << t;
  // Both GPUs' rows, each naming its own GPU.
  const auto gpus = by_gpu(two->db_path);
  EXPECT_EQ(gpus.size(), 2u);
  EXPECT_TRUE(gpus.contains("0000:01:00.0") && gpus.contains("0000:11:00.0"));
  // The winners list comes back in bucket order whatever order the GPUs finished in.
  for (std::size_t i = 1; i < two->winners.size(); ++i) EXPECT_LE(two->winners[i - 1].tokens, two->winners[i].tokens);
}

TEST_F(MultiGpuSearch, AKilledWorkerCostsItsRequestAndTheSearchGoesOn) {
  ScopedEnv env({{"FT_FAKE_STATE", (dir_ / "state").string()}, {"FT_FAKE_KILL", "cuda:1:7"}});
  auto s = run_search(config("killed.db", {"cuda:0", "cuda:1"}));
  ASSERT_TRUE(s) << s.error().describe();
  ASSERT_EQ(s->gpus.size(), 2u);
  EXPECT_EQ(s->gpus[1].crashes, 1u);
  EXPECT_FALSE(s->gpus[1].dead);
  EXPECT_FALSE(s->gpus[1].buckets.empty()) << "the restarted worker took no more work";
  // The request in flight is recorded as failed; every bucket still has a layer.
  auto store = db::Store::open(s->db_path, db::OpenMode::read_only);
  int failed = 0;
  const auto rows = store->measurements();
  for (const auto& m : *rows)
    if (m.status != db::MeasurementStatus::ok) {
      ++failed;
      EXPECT_EQ(m.pci_bus_id, "0000:11:00.0");
    }
  EXPECT_EQ(failed, 1);
  EXPECT_EQ(winners(s->db_path, "Fake H200").size(), 3u * 6u);
}

TEST_F(MultiGpuSearch, AGpuThatStaysDeadLeavesItsWorkToTheOthers) {
  ScopedEnv env({{"FT_FAKE_STATE", (dir_ / "state").string()}, {"FT_FAKE_KILL", "cuda:1:7"}, {"FT_FAKE_DEAD", "1"}});
  auto s = run_search(config("dead.db", {"cuda:0", "cuda:1"}));
  ASSERT_TRUE(s) << s.error().describe();
  ASSERT_EQ(s->gpus.size(), 2u);
  EXPECT_TRUE(s->gpus[1].dead);
  EXPECT_FALSE(s->interrupted);
  std::set<int> buckets;
  for (const GpuSummary& g : s->gpus) buckets.insert(g.buckets.begin(), g.buckets.end());
  EXPECT_EQ(buckets, std::set<int>({1, 4, 16, 33, 64, 256}));
  EXPECT_EQ(winners(s->db_path, "Fake H200").size(), 3u * 6u);
  // The same winners as a search that never lost a GPU.
  auto plain = run_search(config("plain.db", {"cuda:0"}));
  ASSERT_TRUE(plain) << plain.error().describe();
  EXPECT_EQ(winners(s->db_path, "Fake H200"), winners(plain->db_path, "Fake H200"));
}

TEST_F(MultiGpuSearch, EveryGpuDeadIsAnError) {
  ScopedEnv env({{"FT_FAKE_STATE", (dir_ / "state").string()}, {"FT_FAKE_KILL", "cuda:0:3"}, {"FT_FAKE_DEAD", "1"}});
  auto s = run_search(config("alldead.db", {"cuda:0"}));
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().describe().find("no GPU's worker is left running"), std::string::npos) << s.error().describe();
  // The run is closed as failed, its measurements kept.
  auto store = db::Store::open((dir_ / "alldead.db").string(), db::OpenMode::read_only);
  auto runs = store->list_runs();
  ASSERT_TRUE(runs && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, db::RunStatus::failed);
  const auto rows = store->measurements();
  EXPECT_TRUE(rows && !rows->empty());
}

TEST_F(MultiGpuSearch, MixedModelsNeedAllowMixedAndThenGetWinnersEach) {
  ScopedEnv env({{"FT_FAKE_MODEL", "cuda:1=Fake H100"}});
  auto refused = run_search(config("mixed.db", {"cuda:0", "cuda:1"}));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::usage);
  EXPECT_NE(refused.error().message.find("--allow-mixed"), std::string::npos) << refused.error().message;

  SearchConfig cfg = config("mixed.db", {"cuda:0", "cuda:1"});
  cfg.allow_mixed = true;
  auto s = run_search(cfg);
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_EQ(s->device, "Fake H200 (sm_90a) + Fake H100 (sm_90a)");
  // Each model searched every bucket on its own GPU, with winners of its own.
  for (const GpuSummary& g : s->gpus) EXPECT_EQ(g.buckets.size(), 6u) << g.selector;
  EXPECT_EQ(winners(s->db_path, "Fake H200").size(), 3u * 6u);
  EXPECT_EQ(winners(s->db_path, "Fake H100").size(), 3u * 6u);
}

TEST_F(MultiGpuSearch, OneGpuNamedTwiceIsRefused) {
  ScopedEnv env({{"FT_FAKE_PCI", "same"}});
  auto s = run_search(config("twice.db", {"cuda:0", "cuda:1"}));
  ASSERT_FALSE(s);
  EXPECT_EQ(s.error().code, Errc::usage);
  EXPECT_NE(s.error().message.find("are the same GPU"), std::string::npos) << s.error().message;
}

// A worker binary of another build (another protocol version) is refused at
// its first answer with one line naming both versions; nothing is measured.
TEST_F(MultiGpuSearch, AWorkerOfAnotherProtocolVersionIsRefused) {
  ScopedEnv env({{"FT_FAKE_PROTOCOL", std::to_string(protocol::kVersion + 1)}});
  auto s = run_search(config("protocol.db", {"cuda:0"}));
  ASSERT_FALSE(s);
  const std::string line = s.error().describe();
  EXPECT_NE(line.find("the worker speaks protocol " + std::to_string(protocol::kVersion + 1) +
                      ", this flytune speaks protocol " + std::to_string(protocol::kVersion)),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(FT_FAKE_WORKER), std::string::npos) << "the message names the worker binary: " << line;
  EXPECT_EQ(line.find('\n'), std::string::npos) << line;
  auto store = db::Store::open((dir_ / "protocol.db").string(), db::OpenMode::read_only);
  ASSERT_TRUE(store) << store.error().describe();
  auto runs = store->list_runs();
  ASSERT_TRUE(runs && runs->size() == 1u);
  EXPECT_EQ(runs->front().status, db::RunStatus::failed);
  auto rows = store->measurements();
  ASSERT_TRUE(rows);
  EXPECT_TRUE(rows->empty());
}

}  // namespace
}  // namespace ft
