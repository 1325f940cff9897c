// db merge: rows re-keyed with their provenance, winners re-derived across
// inputs, idempotence (table contents compared), and refusals that leave OUT
// as it was (mixed toolchains, foreign or corrupt inputs).
#include <algorithm>
#include <filesystem>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>

#include "store/merge.hpp"
#include "store/store.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using test::FileSnapshot;
using test::ScratchDir;

// How a small test database differs from the next one.
struct Shape {
  std::string started_at = "2026-01-01T00:00:00.000Z";
  std::string toolchain_version = "13.0";
  std::string driver = "580.95.05";
  double fast_us = 100;     // the winner's median at T = 1
  int padding_rows = 0;     // rows stored first, so ids differ between files
  std::string fast_source;  // the fast variant's source hash, when not the sample's
  std::vector<std::byte> code{std::byte{1}, std::byte{2}, std::byte{3}};
};

void make_db(const std::string& path, const Shape& s) {
  auto opened = db::Store::open(path);
  ASSERT_TRUE(opened) << opened.error().describe();
  db::Store& store = *opened;
  for (int i = 0; i < s.padding_rows; ++i) {
    ASSERT_TRUE(store.upsert_toolchain({0, "clang", "pad" + std::to_string(i), "/pad"}));
    ASSERT_TRUE(store.upsert_problem({0, "pad" + std::to_string(i), 1, 1, 1, 1, "bf16", "swiglu", "uniform"}));
  }
  auto run = db::RunRecord::for_this_build("flytune search --shard x", "halving", {{"tokens", {1}}});
  run.started_at = s.started_at;
  test::SampleIds ids;
  ids.run = store.begin_run(run).value();
  DeviceInfo info;
  info.runtime = "cuda";
  info.name = "NVIDIA H200";
  info.arch = "sm_90a";
  info.compute_units = 132;
  info.driver_version = s.driver;
  info.runtime_version = "13.0";
  ids.device = store.upsert_device(db::DeviceRecord::from(info)).value();
  ids.toolchain = store.upsert_toolchain({0, "nvrtc", s.toolchain_version, "libnvrtc.so"}).value();
  ids.problem = store.upsert_problem({0, "moe_tiny", 8, 256, 512, 2, "bf16", "swiglu", "uniform"}).value();
  auto fast = test::sample_variant(ids.toolchain, "ft_fast", 128);
  if (!s.fast_source.empty()) fast.source_hash = s.fast_source;
  auto slow = test::sample_variant(ids.toolchain, "ft_slow", 64);
  ids.variant_fast = store.upsert_variant(fast).value();
  ids.variant_slow = store.upsert_variant(slow).value();
  ASSERT_TRUE(store.put_code_object("co-ft_fast", "cubin", s.code));
  auto m = test::sample_measurement(ids, ids.variant_fast, 1, s.fast_us);
  m.measured_at = s.started_at;
  ASSERT_TRUE(store.add_measurement(m));
  m = test::sample_measurement(ids, ids.variant_slow, 1, 500);
  m.measured_at = s.started_at;
  ASSERT_TRUE(store.add_measurement(m));
  db::WinnerRecord w{ids.problem, ids.device, 1, "moe1", ids.variant_fast, ids.run, s.fast_us, std::nullopt,
                     std::nullopt, ids.variant_slow, 500 / s.fast_us, s.started_at};
  ASSERT_TRUE(store.set_winner(w));
  ASSERT_TRUE(store.end_run(ids.run, db::RunStatus::finished));
}

// Every table's rows as text, ids included, for comparing a database with itself later.
std::string dump(const std::string& path) {
  sqlite3* db = nullptr;
  EXPECT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  std::string out;
  for (const char* table : {"runs", "devices", "toolchains", "problems", "variants", "code_objects", "measurements",
                            "winners"}) {
    std::string sql = std::string("SELECT * FROM ") + table + " ORDER BY 1, 2, 3";
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK);
    out += std::string(table) + ":\n";
    while (sqlite3_step(s) == SQLITE_ROW) {
      for (int c = 0; c < sqlite3_column_count(s); ++c) {
        const unsigned char* t = sqlite3_column_text(s, c);
        out += t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(s, c)) : "NULL";
        out += '|';
      }
      out += '\n';
    }
    sqlite3_finalize(s);
  }
  sqlite3_close(db);
  return out;
}

db::Store open_ro(const std::string& path) { return db::Store::open(path, db::OpenMode::read_only).value(); }

// (kernel, tokens, median, measured_at) of every measurement: ids left out.
std::multiset<std::tuple<std::string, int, double, std::string>> measured(const std::string& path) {
  auto store = open_ro(path);
  std::multiset<std::tuple<std::string, int, double, std::string>> out;
  const auto all = store.measurements().value();
  for (const auto& m : all)
    out.insert({store.variant(m.variant_id).value()->kernel_name, m.tokens, m.median_us.value_or(0), m.measured_at});
  return out;
}

class Merge : public ::testing::Test {
 protected:
  ScratchDir dir_;
  std::string a_ = dir_.file("a.db"), b_ = dir_.file("b.db"), out_ = dir_.file("out.db");
};

TEST_F(Merge, RekeysRowsAndKeepsTheirProvenance) {
  make_db(a_, {});
  make_db(b_, {.started_at = "2026-01-02T00:00:00.000Z", .fast_us = 90, .padding_rows = 3,
               .code = {std::byte{9}}});
  auto merged = db::merge_databases(out_, {a_, b_});
  ASSERT_TRUE(merged) << merged.error().describe();

  auto out = open_ro(out_);
  auto runs = out.list_runs().value();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].started_at, "2026-01-01T00:00:00.000Z");
  EXPECT_EQ(runs[1].started_at, "2026-01-02T00:00:00.000Z");
  for (const auto& r : runs) {
    EXPECT_EQ(r.status, db::RunStatus::finished);
    EXPECT_FALSE(r.ended_at.empty());
    EXPECT_EQ(r.command_line, "flytune search --shard x");
    EXPECT_EQ(r.pid, long(getpid()));
  }
  EXPECT_EQ(out.devices().value().size(), 1u);     // one device row, shared
  EXPECT_EQ(out.toolchains().value().size(), 4u);  // nvrtc 13.0 and b's three padding rows
  EXPECT_EQ(out.variants().value().size(), 2u);    // same kernel + target + toolchain: one row
  auto expected = measured(a_);
  expected.merge(measured(b_));
  EXPECT_EQ(measured(out_), expected);
  // The code object is kept by hash: the first copy (a's bytes) stays.
  EXPECT_EQ(out.code_object("co-ft_fast").value(), (std::vector<std::byte>{std::byte{1}, std::byte{2}, std::byte{3}}));
  EXPECT_EQ(out.code_object_format("co-ft_fast").value(), "cubin");
}

TEST_F(Merge, KeepsTheFastestWinnerWhicheverOrder) {
  make_db(a_, {});
  make_db(b_, {.started_at = "2026-01-02T00:00:00.000Z", .fast_us = 90, .padding_rows = 2});
  for (const auto& inputs : {std::vector{a_, b_}, std::vector{b_, a_}}) {
    std::filesystem::remove(out_);
    auto merged = db::merge_databases(out_, inputs);
    ASSERT_TRUE(merged) << merged.error().describe();
    auto winners = open_ro(out_).winners().value();
    ASSERT_EQ(winners.size(), 1u);
    EXPECT_DOUBLE_EQ(winners[0].winner.median_us, 90);
    EXPECT_EQ(winners[0].variant.kernel_name, "ft_fast");
    EXPECT_EQ(winners[0].problem.key, "moe_tiny");
    EXPECT_EQ(winners[0].winner.chosen_at, "2026-01-02T00:00:00.000Z");  // b's winner, b's run
    auto runs = open_ro(out_).list_runs().value();
    auto run = std::find_if(runs.begin(), runs.end(), [&](const auto& r) { return r.id == winners[0].winner.run_id; });
    ASSERT_NE(run, runs.end());
    EXPECT_EQ(run->started_at, "2026-01-02T00:00:00.000Z");
    ASSERT_TRUE(winners[0].winner.default_variant_id);
    EXPECT_EQ(open_ro(out_).variant(*winners[0].winner.default_variant_id).value()->kernel_name, "ft_slow");
  }
}

TEST_F(Merge, WinnersOfOtherDeviceRowsDoNotCompete) {
  make_db(a_, {});
  make_db(b_, {.started_at = "2026-01-02T00:00:00.000Z", .driver = "590.1", .fast_us = 50});
  ASSERT_TRUE(db::merge_databases(out_, {a_, b_}));
  auto winners = open_ro(out_).winners().value();
  ASSERT_EQ(winners.size(), 2u);
  std::set<std::pair<std::string, double>> got;
  for (const auto& w : winners) got.insert({w.device.driver_version, w.winner.median_us});
  EXPECT_EQ(got, (std::set<std::pair<std::string, double>>{{"580.95.05", 100}, {"590.1", 50}}));
}

TEST_F(Merge, IsIdempotent) {
  make_db(a_, {});
  make_db(b_, {.started_at = "2026-01-02T00:00:00.000Z", .fast_us = 120, .padding_rows = 1});
  ASSERT_TRUE(db::merge_databases(out_, {a_, b_}));
  const std::string once = dump(out_);
  auto again = db::merge_databases(out_, {a_, b_, a_});
  ASSERT_TRUE(again) << again.error().describe();
  EXPECT_EQ(again->winners_changed, 0);
  EXPECT_EQ(again->rows_before, again->rows_after);
  EXPECT_EQ(dump(out_), once);
  auto self = db::merge_databases(out_, {out_});
  ASSERT_TRUE(self) << self.error().describe();
  EXPECT_EQ(dump(out_), once);
  EXPECT_NE(once.find("moe_tiny"), std::string::npos);  // the dump holds the rows
}

TEST_F(Merge, MergesTheCheckedInH200DatabaseUnchanged) {
  const std::string h200 = std::string(FT_TEST_DATA_DIR) + "/h200.db";
  auto merged = db::merge_databases(out_, {h200});
  ASSERT_TRUE(merged) << merged.error().describe();
  auto in = open_ro(h200);
  auto out = open_ro(out_);
  auto names = [](const std::vector<db::WinnerRow>& rows) {
    std::set<std::tuple<std::string, std::string, int, std::string, std::string, double>> s;
    for (const auto& w : rows)
      s.insert({w.problem.key, w.device.name, w.winner.tokens, w.winner.kind, w.variant.kernel_name,
                w.winner.median_us});
    return s;
  };
  const auto in_winners = in.winners().value();
  ASSERT_FALSE(in_winners.empty());
  EXPECT_EQ(names(out.winners().value()), names(in_winners));
  // Every table of one input merged into nothing has the input's row count
  // (code objects included; layer winners' pseudo variants have none).
  EXPECT_EQ(out.schema_info().value().table_rows, in.schema_info().value().table_rows);
  const auto out_winners = out.winners().value();
  for (const auto& w : out_winners) {
    if (!w.variant.code_object_hash.empty()) {
      EXPECT_TRUE(out.code_object(w.variant.code_object_hash).value()) << w.variant.kernel_name;
    }
  }
  const std::string once = dump(out_);
  ASSERT_TRUE(db::merge_databases(out_, {h200}));
  EXPECT_EQ(dump(out_), once);
}

TEST_F(Merge, RefusesWinnersOfTwoToolchainVersionsAndLeavesOutAsItWas) {
  make_db(a_, {});
  make_db(b_, {.started_at = "2026-01-02T00:00:00.000Z", .toolchain_version = "12.8", .fast_us = 90});
  ASSERT_TRUE(db::merge_databases(out_, {a_}));
  const auto before = FileSnapshot::of(out_);
  const std::string rows = dump(out_);
  auto merged = db::merge_databases(out_, {b_});
  ASSERT_FALSE(merged);
  const std::string msg = merged.error().message;
  EXPECT_NE(msg.find("nvrtc 13.0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nvrtc 12.8"), std::string::npos) << msg;
  EXPECT_NE(msg.find("moe_tiny"), std::string::npos) << msg;
  EXPECT_EQ(dump(out_), rows);
  EXPECT_EQ(FileSnapshot::of(out_).bytes, before.bytes);

  // A new OUT that fails is not left behind.
  const std::string fresh = dir_.file("fresh.db");
  ASSERT_FALSE(db::merge_databases(fresh, {a_, b_}));
  EXPECT_FALSE(std::filesystem::exists(fresh));
}

TEST_F(Merge, RefusesAVariantBuiltFromOtherSources) {
  make_db(a_, {});
  make_db(b_, {.started_at = "2026-01-02T00:00:00.000Z", .fast_source = "src-changed-templates"});
  ASSERT_TRUE(db::merge_databases(out_, {a_}));
  const std::string rows = dump(out_);
  auto merged = db::merge_databases(out_, {b_});
  ASSERT_FALSE(merged);
  EXPECT_NE(merged.error().message.find("variant ft_fast (sm_90a) was built from other sources"), std::string::npos)
      << merged.error().describe();
  EXPECT_EQ(merged.error().context, b_);
  EXPECT_EQ(dump(out_), rows);
}

TEST_F(Merge, ATransactionThatFailsWritesNothing) {
  auto store = db::Store::open(out_).value();
  auto failed = store.transaction([&]() -> Status {
    FT_CHECK(store.upsert_toolchain({0, "nvrtc", "13.0", "libnvrtc.so"}));
    return fail(Errc::invalid_input, "stop here");
  });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, "stop here");
  EXPECT_TRUE(store.toolchains().value().empty());
  ASSERT_TRUE(store.transaction([&]() -> Status {
    FT_CHECK(store.upsert_toolchain({0, "nvrtc", "13.0", "x"}));
    return {};
  }));
  EXPECT_EQ(store.toolchains().value().size(), 1u);
}

TEST_F(Merge, RefusesForeignOrCorruptInputsBeforeTouchingOut) {
  make_db(a_, {});
  ASSERT_TRUE(db::merge_databases(out_, {a_}));
  const auto before = FileSnapshot::of(out_);
  const std::string foreign = dir_.file("foreign.db"), corrupt = dir_.file("corrupt.db");
  test::raw_sql(foreign, "CREATE TABLE t (x INTEGER)");
  test::write_bytes(corrupt, "not a database at all, just text that is long enough to be read as a header....");
  for (const auto& bad : {foreign, corrupt, dir_.file("missing.db")}) {
    auto merged = db::merge_databases(out_, {a_, bad});
    ASSERT_FALSE(merged) << bad;
    EXPECT_EQ(merged.error().context, bad) << merged.error().describe();
    EXPECT_EQ(FileSnapshot::of(out_), before) << bad;
  }
  EXPECT_FALSE(db::merge_databases(out_, {}));
}

}  // namespace
}  // namespace ft
