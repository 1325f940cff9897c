// The store: opening and refusing files (never modifying a refused one),
// records round-tripping, resume lookups, winners, crash safety and several
// handles on one file.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "store/store.hpp"
#include "generator/problem.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft::db {
namespace {

using test::FileSnapshot;
using test::ScratchDir;

bool exists(const std::string& path) { return std::filesystem::exists(path); }

// ---- Opening -----------------------------------------------------------------

TEST(StoreOpen, MissingFileIsCreatedInCreateMode) {
  ScratchDir dir;
  auto store = Store::open(dir.file("new.db"), OpenMode::create);
  ASSERT_TRUE(store) << store.error().describe();
  EXPECT_TRUE(exists(dir.file("new.db")));
  EXPECT_FALSE(store->read_only());
}

TEST(StoreOpen, MissingFileIsRefusedWhenItMustExist) {
  ScratchDir dir;
  for (OpenMode mode : {OpenMode::existing, OpenMode::read_only}) {
    auto store = Store::open(dir.file("absent.db"), mode);
    ASSERT_FALSE(store);
    EXPECT_EQ(store.error().code, Errc::not_found);
    EXPECT_EQ(store.error().describe(), dir.file("absent.db") + ": no such database; run 'flytune search' first");
    EXPECT_FALSE(exists(dir.file("absent.db")));
  }
}

TEST(StoreOpen, EmptyFileIsInitialised) {
  ScratchDir dir;
  std::string path = dir.file("empty.db");
  test::write_bytes(path, "");
  auto ro = Store::open(path, OpenMode::read_only);
  ASSERT_FALSE(ro);
  EXPECT_EQ(std::filesystem::file_size(path), 0u);
  auto store = Store::open(path, OpenMode::create);
  ASSERT_TRUE(store) << store.error().describe();
  EXPECT_EQ(store->schema_info()->version, schema_version());
}

TEST(StoreOpen, EmptySqliteFileIsInitialised) {
  ScratchDir dir;
  std::string path = dir.file("blank.db");
  test::raw_sql(path, "PRAGMA user_version = 0; VACUUM;");
  auto store = Store::open(path, OpenMode::create);
  ASSERT_TRUE(store) << store.error().describe();
  EXPECT_EQ(store->schema_info()->application_id, kApplicationId);
}

TEST(StoreOpen, ReopenIsIdempotent) {
  ScratchDir dir;
  std::string path = dir.file("flytune.db");
  test::SampleIds ids;
  std::string schema;
  {
    auto store = Store::open(path);
    ASSERT_TRUE(store) << store.error().describe();
    ids = test::fill_sample(*store);
    schema = store->schema_sql().value();
  }
  for (int i = 0; i < 2; ++i) {
    auto store = Store::open(path);
    ASSERT_TRUE(store) << store.error().describe();
    EXPECT_EQ(store->schema_sql().value(), schema);
    auto info = store->schema_info().value();
    EXPECT_EQ(info.migrations.size(), static_cast<std::size_t>(schema_version()));
    EXPECT_EQ(store->list_runs()->size(), 1u);
    EXPECT_EQ(store->measurements()->size(), 6u);
  }
  // Read-only opening writes nothing at all.
  FileSnapshot before = FileSnapshot::of(path);
  {
    auto store = Store::open(path, OpenMode::read_only);
    ASSERT_TRUE(store) << store.error().describe();
    EXPECT_TRUE(store->read_only());
    EXPECT_EQ(store->winners()->size(), 2u);
  }
  EXPECT_EQ(FileSnapshot::of(path), before);
}

TEST(StoreOpen, ReadOnlyStoreRefusesWrites) {
  ScratchDir dir;
  std::string path = dir.file("flytune.db");
  { ASSERT_TRUE(Store::open(path)); }
  auto store = Store::open(path, OpenMode::read_only);
  ASSERT_TRUE(store) << store.error().describe();
  auto run = store->begin_run(RunRecord::for_this_build("x", "exhaustive"));
  ASSERT_FALSE(run);
  EXPECT_NE(run.error().message.find("read-only"), std::string::npos);
}

TEST(StoreOpen, AMissingFolderIsNamed) {
  ScratchDir dir;
  auto store = Store::open(dir.file("nodir/x.db"), OpenMode::create);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().describe().find("the folder '" + dir.file("nodir") + "' does not exist"), std::string::npos)
      << store.error().describe();
}

TEST(StoreOpen, AFifoIsRefusedWithoutBlocking) {
  ScratchDir dir;
  ASSERT_EQ(mkfifo(dir.file("fifo.db").c_str(), 0600), 0);
  auto store = Store::open(dir.file("fifo.db"), OpenMode::read_only);
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find("not a regular file"), std::string::npos) << store.error().describe();
}

TEST(StoreOpen, OnlyRunsOfDeadProcessesOnThisHostAreClosed) {
  ScratchDir dir;
  const std::string path = dir.file("flytune.db");
  pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  std::int64_t mine = 0, elsewhere = 0, reused = 0, dead = 0;
  {
    auto store = Store::open(path);
    ASSERT_TRUE(store) << store.error().describe();
    mine = store->begin_run(RunRecord::for_this_build("search", "halving")).value();  // this live process
    RunRecord other = RunRecord::for_this_build("search", "halving");
    other.pid = gone;
    other.hostname = "another-host";
    elsewhere = store->begin_run(other).value();  // a pid of another machine says nothing here
    RunRecord r = RunRecord::for_this_build("search", "halving");
    r.process = "not-this-program";  // this pid, but as if reused by another program
    r.pid = long(getppid());
    reused = store->begin_run(r).value();
    r.pid = gone;
    r.process = "flytune";
    dead = store->begin_run(r).value();
  }
  auto store = Store::open(path);
  ASSERT_TRUE(store) << store.error().describe();
  std::vector<std::int64_t> closed;
  for (const StaleRun& s : store->stale_runs()) closed.push_back(s.id);
  EXPECT_EQ(closed, (std::vector<std::int64_t>{reused, dead}));
  const std::vector<RunRecord> runs = store->list_runs().value();
  for (const RunRecord& r : runs) {
    const bool stale = r.id == reused || r.id == dead;
    EXPECT_EQ(r.status, stale ? RunStatus::interrupted : RunStatus::running) << r.id;
  }
  EXPECT_TRUE(mine && elsewhere);
}

TEST(StoreRecordsText, ToolchainLabelNamesTheBackendOnce) {
  EXPECT_EQ((ToolchainRecord{0, "nvrtc", "nvrtc 13.0", ""}.label()), "nvrtc 13.0");
  EXPECT_EQ((ToolchainRecord{0, "nvrtc", "13.0", ""}.label()), "nvrtc 13.0");
  EXPECT_EQ((ToolchainRecord{0, "comgr", "", ""}.label()), "comgr");
}

TEST(StoreOpen, DirectoryIsRefused) {
  ScratchDir dir;
  std::filesystem::create_directory(dir.file("d.db"));
  auto store = Store::open(dir.file("d.db"));
  ASSERT_FALSE(store);
  EXPECT_NE(store.error().message.find("directory"), std::string::npos);
}

// A file flytune must refuse, how to make it, and what the refusal says.
struct RefusedFile {
  const char* name;
  void (*make)(const std::string& path);
  const char* message;
};

void make_text(const std::string& path) { test::write_bytes(path, "tokens,us\n1,100\n16,120\n"); }
void make_garbage(const std::string& path) {
  std::string bytes(8192, '\0');
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131 + 7) & 0xff);
  test::write_bytes(path, bytes);
}
void make_fake_header(const std::string& path) {
  // The SQLite magic followed by junk: passes the header check, fails in SQLite.
  std::string bytes(std::string("SQLite format 3") + '\0');
  bytes += std::string(4096 - bytes.size(), '\x5a');
  test::write_bytes(path, bytes);
}
void make_foreign_tables(const std::string& path) {
  test::raw_sql(path, "CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT); INSERT INTO photos (name) VALUES ('a');");
}
void make_foreign_app_id(const std::string& path) {
  test::raw_sql(path, "PRAGMA application_id = 0x47504B47; CREATE TABLE t (x);");
}
void make_foreign_app_id_no_tables(const std::string& path) {
  test::raw_sql(path, "PRAGMA application_id = 0x47504B47; VACUUM;");
}
void make_newer(const std::string& path) {
  { ASSERT_TRUE(Store::open(path)); }
  test::raw_sql(path, "PRAGMA user_version = 7;");
}
void make_corrupt_page(const std::string& path) {
  {
    auto store = Store::open(path);
    ASSERT_TRUE(store);
    test::fill_sample(*store);
  }
  // Overwrite the middle of the file (b-tree pages of tables) with junk;
  // page 1 (header + schema) stays intact so only a check can tell.
  std::string bytes = test::read_bytes(path);
  ASSERT_GT(bytes.size(), 4u * 4096);
  for (std::size_t i = 2 * 4096; i < 4 * 4096; ++i) bytes[i] = static_cast<char>(0xa5);
  test::write_bytes(path, bytes);
}
void make_truncated(const std::string& path) {
  {
    auto store = Store::open(path);
    ASSERT_TRUE(store);
    test::fill_sample(*store);
  }
  std::string bytes = test::read_bytes(path);
  test::write_bytes(path, bytes.substr(0, bytes.size() / 2));
}

class StoreRefuses : public ::testing::TestWithParam<RefusedFile> {};

TEST_P(StoreRefuses, WithOneClearLineAndFileUntouched) {
  const RefusedFile& rf = GetParam();
  ScratchDir dir;
  std::string path = dir.file("input.db");
  rf.make(path);
  if (::testing::Test::HasFatalFailure()) return;
  auto listing = [&] {
    std::vector<std::string> names;
    for (auto& e : std::filesystem::directory_iterator(dir.file(""))) names.push_back(e.path().filename().string());
    std::ranges::sort(names);
    return names;
  };
  auto files_before = listing();
  FileSnapshot before = FileSnapshot::of(path);
  for (OpenMode mode : {OpenMode::create, OpenMode::existing, OpenMode::read_only}) {
    auto store = Store::open(path, mode);
    ASSERT_FALSE(store) << rf.name;
    std::string line = store.error().describe();
    EXPECT_EQ(line.find('\n'), std::string::npos) << line;
    EXPECT_EQ(line.rfind(path + ": ", 0), 0u) << line;
    EXPECT_NE(line.find(rf.message), std::string::npos) << rf.name << ": " << line;
    EXPECT_EQ(store.error().code, Errc::database) << line;
  }
  EXPECT_TRUE(FileSnapshot::of(path) == before) << rf.name << ": the refused file changed";
  EXPECT_EQ(listing(), files_before) << rf.name << ": files appeared or vanished beside it";
}

INSTANTIATE_TEST_SUITE_P(
    Files, StoreRefuses,
    ::testing::Values(
        RefusedFile{"text", make_text, "not a flytune database (not an SQLite file); pass a new path or remove it"},
        RefusedFile{"garbage", make_garbage, "not a flytune database (not an SQLite file); pass a new path or remove it"},
        RefusedFile{"fake_header", make_fake_header, "not a flytune database (not an SQLite file)"},
        RefusedFile{"foreign_tables", make_foreign_tables, "not a flytune database (an SQLite file of another application)"},
        RefusedFile{"foreign_app_id", make_foreign_app_id, "another application, application_id 0x47504b47"},
        RefusedFile{"foreign_app_id_no_tables", make_foreign_app_id_no_tables, "another application"},
        RefusedFile{"newer", make_newer, "database schema is version 7, this flytune supports "},
        RefusedFile{"corrupt_page", make_corrupt_page, "database is corrupt"},
        RefusedFile{"truncated", make_truncated, "database is corrupt"}),
    [](const auto& info) { return std::string(info.param.name); });

// ---- Records -----------------------------------------------------------------

class StoreRecords : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::open(dir_.file("flytune.db"));
    ASSERT_TRUE(s) << s.error().describe();
    store_.emplace(std::move(*s));
    ids_ = test::fill_sample(*store_);
  }
  ScratchDir dir_;
  std::optional<Store> store_;
  test::SampleIds ids_;
};

TEST_F(StoreRecords, RunsCarryProvenance) {
  auto runs = store_->list_runs();
  ASSERT_TRUE(runs) << runs.error().describe();
  ASSERT_EQ(runs->size(), 1u);
  const RunRecord& r = runs->front();
  EXPECT_EQ(r.id, ids_.run);
  EXPECT_EQ(r.status, RunStatus::finished);
  EXPECT_FALSE(r.ended_at.empty());
  EXPECT_LE(r.started_at, r.ended_at);
  EXPECT_EQ(r.started_at.size(), std::string("2025-01-31T12:00:00.123Z").size()) << r.started_at;
  EXPECT_EQ(r.strategy, "halving");
  EXPECT_EQ(r.options["tokens"], "1,16");
  EXPECT_FALSE(r.flytune_version.empty());
  EXPECT_FALSE(r.git_commit.empty());
  EXPECT_FALSE(r.hostname.empty());
  EXPECT_FALSE(store_->end_run(9999, RunStatus::failed));
}

TEST_F(StoreRecords, UpsertsFindExistingRows) {
  auto devices = store_->devices().value();
  ASSERT_EQ(devices.size(), 1u);
  DeviceRecord d = devices[0];
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_EQ(d.memory_bytes, 150'000'000'000);
  d.id = 0;
  EXPECT_EQ(store_->upsert_device(d).value(), ids_.device);
  d.driver_version = "590.10";  // a driver upgrade is a new device row
  EXPECT_NE(store_->upsert_device(d).value(), ids_.device);
  auto dry = store_->upsert_device(DeviceRecord::compile_only("gfx942")).value();
  EXPECT_EQ(store_->upsert_device(DeviceRecord::compile_only("gfx942")).value(), dry);
  EXPECT_EQ(store_->devices()->size(), 3u);

  EXPECT_EQ(store_->upsert_toolchain({0, "nvrtc", "13.0", "libnvrtc.so.13"}).value(), ids_.toolchain);
  EXPECT_FALSE(store_->upsert_toolchain({0, "gcc", "12", "/usr/bin/g++"}));  // not a backend

  auto mixtral = problem_from_preset("mixtral-8x7b");
  ASSERT_TRUE(mixtral) << mixtral.error().describe();
  ProblemRecord p = ProblemRecord::from(*mixtral);
  EXPECT_EQ(p.key, "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform");
  EXPECT_EQ(store_->upsert_problem(p).value(), ids_.problem);
  EXPECT_EQ(store_->problems()->size(), 1u);
}

TEST_F(StoreRecords, VariantUpsertUpdatesCompileResults) {
  auto before = store_->variant(ids_.variant_fast).value();
  ASSERT_TRUE(before);
  EXPECT_EQ(before->params["tile_n"], 128);
  EXPECT_EQ(before->resources.regs, 128);
  EXPECT_FALSE(before->resources.vgprs);
  EXPECT_EQ(before->matrix_ops["HGMMA"], 16);
  ASSERT_TRUE(before->compile_seconds);
  EXPECT_DOUBLE_EQ(*before->compile_seconds, 1.25);

  VariantRecord again = *before;
  again.id = 0;
  again.code_object_hash = "co-new";
  again.resources.regs = 96;
  again.resources.spills = 4;
  EXPECT_EQ(store_->upsert_variant(again).value(), ids_.variant_fast);
  auto after = store_->variant(ids_.variant_fast).value();
  EXPECT_EQ(after->code_object_hash, "co-new");
  EXPECT_EQ(after->resources.regs, 96);
  EXPECT_EQ(after->resources.spills, 4);
  EXPECT_EQ(after->created_at, before->created_at);

  // The same kernel name from another toolchain is another variant.
  auto other_tc = store_->upsert_toolchain({0, "nvrtc", "13.1", "libnvrtc.so.13"}).value();
  again.toolchain_id = other_tc;
  EXPECT_NE(store_->upsert_variant(again).value(), ids_.variant_fast);

  auto broken = store_->variant(ids_.variant_broken).value();
  EXPECT_EQ(broken->compile_status, CompileStatus::compile_error);
  EXPECT_TRUE(broken->code_object_hash.empty());
  EXPECT_FALSE(broken->resources.regs);
  EXPECT_FALSE(store_->variant(424242).value());
}

TEST_F(StoreRecords, VariantFilters) {
  EXPECT_EQ(store_->variants()->size(), 3u);
  EXPECT_EQ(store_->variants({.status = CompileStatus::compile_error})->size(), 1u);
  EXPECT_EQ(store_->variants({.status = CompileStatus::ok})->size(), 2u);
  EXPECT_EQ(store_->variants({.target = "gfx942"})->size(), 0u);
  EXPECT_EQ(store_->variants({.limit = 2})->size(), 2u);
  auto by_name = store_->variants({.kernel_name = "ft_sm_90a_moe1_bf16_m64n64k32_w4_wgmma_s2"}).value();
  ASSERT_EQ(by_name.size(), 1u);
  EXPECT_EQ(by_name[0].id, ids_.variant_slow);
}

TEST_F(StoreRecords, MeasurementRoundTrip) {
  auto m = test::sample_measurement(ids_, ids_.variant_slow, 4096, 2500.5);
  m.phase = "long";
  m.temperature_c = 61.5;
  m.mem_clock_mhz = 2619;
  auto id = store_->add_measurement(m);
  ASSERT_TRUE(id) << id.error().describe();
  auto got = store_->latest_measurement(m.key()).value();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->id, *id);
  EXPECT_EQ(got->run_id, ids_.run);
  EXPECT_EQ(got->phase, "long");
  EXPECT_EQ(got->status, MeasurementStatus::ok);
  EXPECT_DOUBLE_EQ(*got->median_us, 2500.5);
  EXPECT_DOUBLE_EQ(*got->p90_us, 2500.5 * 1.03);
  EXPECT_EQ(got->samples, 50);
  EXPECT_DOUBLE_EQ(*got->temperature_c, 61.5);
  EXPECT_EQ(got->mem_clock_mhz, 2619);
  EXPECT_EQ(got->pci_bus_id, "0000:19:00.0");
  EXPECT_FALSE(got->measured_at.empty());

  auto failed = store_->latest_measurement({ids_.variant_broken, ids_.problem, ids_.device, 16}).value();
  ASSERT_TRUE(failed);
  EXPECT_EQ(failed->status, MeasurementStatus::compile_error);
  EXPECT_FALSE(failed->median_us);
  EXPECT_EQ(failed->error_message, "compile failed");
}

TEST_F(StoreRecords, ForeignKeysAndChecksAreEnforced) {
  auto m = test::sample_measurement(ids_, 999, 1, 1.0);  // no such variant
  auto r = store_->add_measurement(m);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("FOREIGN KEY"), std::string::npos) << r.error().message;
  m = test::sample_measurement(ids_, ids_.variant_fast, 0, 1.0);  // tokens must be >= 1
  EXPECT_FALSE(store_->add_measurement(m));
}

TEST_F(StoreRecords, ResumeFindsTheNewestMeasurementOfAKey) {
  MeasurementKey key{ids_.variant_slow, ids_.problem, ids_.device, 16};
  auto first = store_->latest_measurement(key).value();
  ASSERT_TRUE(first);
  EXPECT_DOUBLE_EQ(*first->median_us, 166.0);

  auto retry = test::sample_measurement(ids_, ids_.variant_slow, 16, 140.0);
  retry.phase = "ab";
  auto retry_id = store_->add_measurement(retry).value();
  auto latest = store_->latest_measurement(key).value();
  EXPECT_EQ(latest->id, retry_id);
  EXPECT_DOUBLE_EQ(*latest->median_us, 140.0);
  // Other keys are not affected, and an unmeasured key has no result.
  EXPECT_DOUBLE_EQ(*store_->latest_measurement({ids_.variant_slow, ids_.problem, ids_.device, 1}).value()->median_us,
                   151.0);
  EXPECT_FALSE(store_->latest_measurement({ids_.variant_slow, ids_.problem, ids_.device, 64}).value());
  EXPECT_FALSE(store_->latest_measurement({ids_.variant_slow, ids_.problem, ids_.device + 1, 16}).value());

  // History is kept; latest_only keeps one row per key.
  EXPECT_EQ(store_->measurements({.variant_id = ids_.variant_slow})->size(), 3u);
  auto current = store_->measurements({.variant_id = ids_.variant_slow, .latest_only = true}).value();
  ASSERT_EQ(current.size(), 2u);
  EXPECT_EQ(current[1].id, retry_id);
  EXPECT_EQ(store_->measurements({.status = MeasurementStatus::compile_error})->size(), 2u);
  EXPECT_EQ(store_->measurements({.run_id = ids_.run, .tokens = 1})->size(), 3u);
}

TEST_F(StoreRecords, WinnerUpsertReplacesTheKey) {
  auto rows = store_->winners().value();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].winner.tokens, 1);
  EXPECT_EQ(rows[1].winner.tokens, 16);
  EXPECT_EQ(rows[0].variant.kernel_name, "ft_sm_90a_moe1_bf16_m64n128k32_w4_wgmma_s2");
  EXPECT_EQ(rows[0].problem.key, "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform");
  EXPECT_EQ(rows[0].device.name, "NVIDIA H200");
  EXPECT_EQ(rows[0].toolchain.backend, "nvrtc");
  EXPECT_EQ(rows[0].winner.default_variant_id, ids_.variant_slow);
  EXPECT_NEAR(*rows[0].winner.speedup_vs_default, 151.0 / 101.0, 1e-12);

  WinnerRecord w = rows[1].winner;
  w.variant_id = ids_.variant_slow;
  w.median_us = 90.0;
  w.speedup_vs_default.reset();
  w.chosen_at.clear();
  ASSERT_TRUE(store_->set_winner(w));
  rows = store_->winners({.tokens = 16}).value();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].winner.variant_id, ids_.variant_slow);
  EXPECT_DOUBLE_EQ(rows[0].winner.median_us, 90.0);
  EXPECT_FALSE(rows[0].winner.speedup_vs_default);

  // Another kind for the same key coexists.
  w.kind = "layer";
  ASSERT_TRUE(store_->set_winner(w));
  EXPECT_EQ(store_->winners()->size(), 3u);
  EXPECT_EQ(store_->winners({.kind = "layer"})->size(), 1u);
  EXPECT_EQ(store_->winners({.arch = "sm_90a", .kind = "moe1"})->size(), 2u);
  EXPECT_EQ(store_->winners({.problem_key = "moe_other"})->size(), 0u);
}

TEST_F(StoreRecords, CodeObjectsByHash) {
  std::vector<std::byte> bytes{std::byte{0x7f}, std::byte{'E'}, std::byte{'L'}, std::byte{'F'}, std::byte{0}};
  ASSERT_TRUE(store_->put_code_object("abc123", "cubin", bytes));
  std::vector<std::byte> other{std::byte{1}};
  ASSERT_TRUE(store_->put_code_object("abc123", "cubin", other));  // same hash: first copy stays
  auto got = store_->code_object("abc123").value();
  ASSERT_TRUE(got);
  EXPECT_EQ(*got, bytes);
  EXPECT_FALSE(store_->code_object("nope").value());
  EXPECT_FALSE(store_->put_code_object("x", "zip", bytes));
}

TEST_F(StoreRecords, Statistics) {
  auto counts = store_->measurement_counts().value();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].status, "compile_error");
  EXPECT_EQ(counts[0].count, 2);
  EXPECT_EQ(counts[1].status, "ok");
  EXPECT_EQ(counts[1].count, 4);
  auto variants = store_->variant_counts().value();
  ASSERT_EQ(variants.size(), 2u);
  EXPECT_EQ(variants[0].status, "compile_error");
  EXPECT_EQ(variants[1].count, 2);
  auto info = store_->schema_info().value();
  auto rows = [&](const std::string& table) {
    for (auto& [name, n] : info.table_rows)
      if (name == table) return n;
    return std::int64_t{-1};
  };
  EXPECT_EQ(rows("measurements"), 6);
  EXPECT_EQ(rows("winners"), 2);
  EXPECT_EQ(rows("variants"), 3);
}

TEST_F(StoreRecords, SnapshotIsOneSelfContainedFile) {
  // A writer still holds the source open, so recent pages may be only in its -wal.
  ASSERT_TRUE(store_->add_measurement(test::sample_measurement(ids_, ids_.variant_fast, 64, 120.0)));
  auto reader = Store::open(dir_.file("flytune.db"), OpenMode::read_only);
  ASSERT_TRUE(reader) << reader.error().describe();
  std::string copy = dir_.file("copy.db");
  auto s = reader->snapshot(copy);
  ASSERT_TRUE(s) << s.error().describe();
  EXPECT_FALSE(exists(copy + "-wal"));
  EXPECT_FALSE(reader->snapshot(copy));  // never overwrites
  FileSnapshot before = FileSnapshot::of(copy);
  {
    auto c = Store::open(copy, OpenMode::read_only);
    ASSERT_TRUE(c) << c.error().describe();
    EXPECT_EQ(c->measurements()->size(), 7u);
    EXPECT_EQ(c->winners()->size(), 2u);
    EXPECT_EQ(c->schema_info()->journal_mode, "delete");
    EXPECT_EQ(c->schema_info()->application_id, kApplicationId);
  }
  EXPECT_TRUE(FileSnapshot::of(copy) == before);
  EXPECT_FALSE(exists(copy + "-wal"));
  EXPECT_FALSE(exists(copy + "-shm"));
}

// ---- Crashes and concurrency -------------------------------------------------

TEST(StoreDurability, MeasurementsSurviveACrash) {
  ScratchDir dir;
  std::string path = dir.file("flytune.db");
  test::SampleIds ids;
  {
    auto store = Store::open(path);
    ASSERT_TRUE(store);
    ids = test::fill_sample(*store);
  }
  constexpr int kAdded = 40;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Add measurements, then die without closing anything or running destructors.
    auto store = Store::open(path);
    if (!store) _exit(3);
    auto run = store->begin_run(RunRecord::for_this_build("crash", "exhaustive"));
    if (!run) _exit(4);
    for (int i = 0; i < kAdded; ++i) {
      auto m = test::sample_measurement(ids, ids.variant_fast, 1000 + i, 10.0 + i);
      m.run_id = *run;
      if (!store->add_measurement(m)) _exit(5);
    }
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 1) << "the child failed before it could crash";

  // A read-only look (what 'flytune db' does after a crashed search) sees them all.
  {
    auto ro = Store::open(path, OpenMode::read_only);
    ASSERT_TRUE(ro) << ro.error().describe();
    EXPECT_EQ(ro->measurements()->size(), 6u + kAdded);
    auto runs = ro->list_runs().value();
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[1].status, RunStatus::running);  // never ended: the crash shows
  }
  // Opened read-write, the run of the dead child is closed and reported.
  auto store = Store::open(path);
  ASSERT_TRUE(store) << store.error().describe();
  ASSERT_EQ(store->stale_runs().size(), 1u);
  EXPECT_EQ(store->stale_runs()[0].pid, long(child));
  auto runs = store->list_runs().value();
  EXPECT_EQ(runs[1].status, RunStatus::interrupted);
  EXPECT_EQ(runs[1].pid, long(child));
  EXPECT_FALSE(runs[1].ended_at.empty());
  EXPECT_EQ(store->measurements()->size(), 6u + kAdded);
  for (int i = 0; i < kAdded; ++i) {
    auto m = store->latest_measurement({ids.variant_fast, ids.problem, ids.device, 1000 + i}).value();
    ASSERT_TRUE(m) << i;
    EXPECT_DOUBLE_EQ(*m->median_us, 10.0 + i);
  }
}

TEST(StoreDurability, ABrandNewDatabaseSurvivesACrash) {
  // The schema and the first results may still be only in the -wal file.
  ScratchDir dir;
  std::string path = dir.file("flytune.db");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto store = Store::open(path);
    if (!store) _exit(3);
    test::fill_sample(*store);
    _exit(1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_TRUE(exists(path + "-wal"));
  auto ro = Store::open(path, OpenMode::read_only);
  ASSERT_TRUE(ro) << ro.error().describe();
  EXPECT_EQ(ro->measurements()->size(), 6u);
  EXPECT_EQ(ro->winners()->size(), 2u);
  EXPECT_EQ(ro->schema_info()->application_id, kApplicationId);
}

TEST(StoreConcurrency, TwoHandlesOnOneFile) {
  ScratchDir dir;
  std::string path = dir.file("flytune.db");
  auto a = Store::open(path);
  ASSERT_TRUE(a) << a.error().describe();
  auto ids = test::fill_sample(*a);
  auto b = Store::open(path);
  ASSERT_TRUE(b) << b.error().describe();
  auto reader = Store::open(path, OpenMode::read_only);
  ASSERT_TRUE(reader) << reader.error().describe();
  for (int i = 0; i < 20; ++i) {
    Store& writer = (i % 2 == 0) ? *a : *b;
    ASSERT_TRUE(writer.add_measurement(test::sample_measurement(ids, ids.variant_slow, 100 + i, 5.0 + i)));
    // Each write is visible to every other handle as soon as it returns.
    auto seen = reader->latest_measurement({ids.variant_slow, ids.problem, ids.device, 100 + i}).value();
    ASSERT_TRUE(seen) << i;
    EXPECT_DOUBLE_EQ(*seen->median_us, 5.0 + i);
  }
  EXPECT_EQ(a->measurements()->size(), 26u);
  EXPECT_EQ(b->measurements()->size(), 26u);
}

TEST(StoreConcurrency, ProcessesWritingAtOnceLoseNothing) {
  ScratchDir dir;
  std::string path = dir.file("flytune.db");
  test::SampleIds ids;
  {
    auto store = Store::open(path);
    ASSERT_TRUE(store);
    ids = test::fill_sample(*store);
  }
  constexpr int kWriters = 3;
  constexpr int kEach = 60;
  std::vector<pid_t> children;
  for (int w = 0; w < kWriters; ++w) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      auto store = Store::open(path);
      if (!store) _exit(3);
      for (int i = 0; i < kEach; ++i)
        if (!store->add_measurement(test::sample_measurement(ids, ids.variant_fast, 10'000 * (w + 1) + i, 1.0 + i)))
          _exit(4);
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "writer exit status " << status;
  }
  auto store = Store::open(path, OpenMode::read_only);
  ASSERT_TRUE(store) << store.error().describe();
  EXPECT_EQ(store->measurements()->size(), 6u + kWriters * kEach);
}

}  // namespace
}  // namespace ft::db
