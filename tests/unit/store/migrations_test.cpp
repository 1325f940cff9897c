// Migrations: contiguous numbers from 1, well-formed names, and a fresh
// database whose schema matches the golden file tests/data/schema_vN.sql
// (FLYTUNE_UPDATE_GOLDEN=1 rewrites it).
#include <cstdlib>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "store/migrations.hpp"
#include "store/store.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft::db {
namespace {

TEST(Migrations, EmbeddedNumbersAreContiguousFromOne) {
  auto all = migrations();
  ASSERT_TRUE(all) << all.error().describe();
  ASSERT_FALSE(all->empty());
  std::regex name_form("[0-9]{4}_[a-z0-9]+(_[a-z0-9]+)+");
  for (std::size_t i = 0; i < all->size(); ++i) {
    EXPECT_EQ((*all)[i].version, static_cast<int>(i) + 1);
    EXPECT_TRUE(std::regex_match((*all)[i].name, name_form)) << (*all)[i].name;
    EXPECT_FALSE((*all)[i].sql.empty());
  }
  EXPECT_EQ(schema_version(), all->back().version);
}

TEST(Migrations, GapIsRejected) {
  std::vector<EmbeddedFile> files{{"0001_create_tables.sql", "SELECT 1;"}, {"0003_add_things.sql", "SELECT 1;"}};
  auto r = parse_migrations(files);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("expected 2, found 3"), std::string::npos) << r.error().message;
}

TEST(Migrations, RepeatIsRejected) {
  std::vector<EmbeddedFile> files{{"0001_create_tables.sql", ""}, {"0001_create_more.sql", ""}};
  EXPECT_FALSE(parse_migrations(files));
}

TEST(Migrations, MalformedNameIsRejected) {
  for (const char* bad : {"1_create.sql", "0001-create.sql", "0001_Create.sql", "0001_create.txt", "abcd_x.sql"}) {
    std::vector<EmbeddedFile> files{{bad, ""}};
    EXPECT_FALSE(parse_migrations(files)) << bad;
  }
}

TEST(Migrations, OrderFollowsNumbersNotFileOrder) {
  std::vector<EmbeddedFile> files{{"0002_add_b.sql", "b"}, {"0001_add_a.sql", "a"}};
  auto r = parse_migrations(files);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ((*r)[0].name, "0001_add_a");
  EXPECT_EQ((*r)[1].sql, "b");
}

TEST(Migrations, FreshSchemaMatchesGolden) {
  test::ScratchDir dir;
  auto store = Store::open(dir.file("fresh.db"));
  ASSERT_TRUE(store) << store.error().describe();
  auto sql = store->schema_sql();
  ASSERT_TRUE(sql) << sql.error().describe();
  std::string golden = fmt::format("{}/schema_v{}.sql", FT_TEST_DATA_DIR, schema_version());
  const char* update = std::getenv("FLYTUNE_UPDATE_GOLDEN");
  if (update && std::string(update) == "1") {
    test::write_bytes(golden, *sql);
    GTEST_SKIP() << "rewrote " << golden;
  }
  EXPECT_EQ(*sql, test::read_bytes(golden))
      << "the schema changed; if a new migration is intended, refresh with FLYTUNE_UPDATE_GOLDEN=1";
}

// A row in every table of version 1 (and 2), rows referring to rows: a run,
// an NVIDIA device, a toolchain, a problem, a variant, its code object, a
// measurement and a winner.
constexpr const char* kOldRows =
    "PRAGMA foreign_keys = ON;"
    "INSERT INTO runs (id, started_at, status, command_line, flytune_version, git_commit, templates_commit, "
    "  hostname, strategy) VALUES (1, 't', 'finished', 'flytune search', 'v', 'g', 'g', 'h', 'halving');"
    "INSERT INTO devices (id, runtime, name, arch) VALUES (7, 'cuda', 'NVIDIA H200', 'sm_90a');"
    "INSERT INTO toolchains (id, backend, version, path) VALUES (3, 'nvrtc', 'nvrtc 13.0', '');"
    "INSERT INTO problems (id, key, experts, hidden, inter, topk, dtype, activation, routing) "
    "  VALUES (1, 'p', 4, 256, 512, 2, 'bf16', 'swiglu', 'uniform');"
    "INSERT INTO variants (id, kernel_name, target, kind, source_hash, code_object_hash, toolchain_id, "
    "  compile_status, created_at, updated_at) VALUES (5, 'ft_k', 'sm_90a', 'moe1', 's', 'h1', 3, 'ok', 't', 't');"
    "INSERT INTO code_objects VALUES ('h1', 'cubin', 3, x'010203');"
    "INSERT INTO measurements (run_id, variant_id, problem_id, device_id, tokens, phase, status, measured_at) "
    "  VALUES (1, 5, 1, 7, 16, 'short', 'ok', 't');"
    "INSERT INTO winners (problem_id, device_id, tokens, kind, variant_id, run_id, median_us, chosen_at) "
    "  VALUES (1, 7, 16, 'moe1', 5, 1, 12.5, 't');";

// A file of `version` (the first migrations applied by hand, as a build of that
// version made it) holding kOldRows.
void old_database(const std::string& path, int version) {
  auto all = migrations();
  ASSERT_TRUE(all);
  ASSERT_GT(all->size(), static_cast<std::size_t>(version));
  std::string sql = fmt::format("PRAGMA application_id = {}; BEGIN;", kApplicationId);
  for (int v = 0; v < version; ++v)
    sql += fmt::format("{}; INSERT INTO schema_migrations VALUES ({}, '{}', '2026-01-01T00:00:00.000Z');",
                       std::string((*all)[v].sql), v + 1, (*all)[v].name);
  test::raw_sql(path, sql + fmt::format("PRAGMA user_version = {}; COMMIT;", version));
  test::raw_sql(path, kOldRows);
}

// A version-1 file with rows in every table migration 2 rebuilds (and rows
// referring to them) keeps them all, keys intact, and then takes the emulator's
// device, toolchain and code-object format, which version 1 refused.
TEST(Migrations, Version1KeepsItsRowsAndTakesTheEmulator) {
  test::ScratchDir dir;
  const std::string path = dir.file("v1.db");
  old_database(path, 1);

  auto store = Store::open(path, OpenMode::existing);
  ASSERT_TRUE(store) << store.error().describe();
  auto info = store->schema_info();
  ASSERT_TRUE(info);
  EXPECT_EQ(info->version, schema_version());
  auto devices = store->devices();
  ASSERT_TRUE(devices && devices->size() == 1u);
  EXPECT_EQ(devices->front().id, 7);
  EXPECT_EQ(devices->front().name, "NVIDIA H200");
  auto winners = store->winners();
  ASSERT_TRUE(winners) << winners.error().describe();
  ASSERT_EQ(winners->size(), 1u);
  EXPECT_EQ(winners->front().device.name, "NVIDIA H200");
  EXPECT_EQ(winners->front().toolchain.backend, "nvrtc");
  EXPECT_EQ(store->code_object_format("h1").value(), std::optional<std::string>("cubin"));
  auto ms = store->measurements();
  ASSERT_TRUE(ms && ms->size() == 1u);
  EXPECT_EQ(ms->front().device_id, 7);

  DeviceInfo emu;
  emu.runtime = "emu";
  emu.name = "flytune CPU emulator (sm_90a)";
  emu.arch = "sm_90a";
  auto dev = store->upsert_device(DeviceRecord::from(emu));
  EXPECT_TRUE(dev) << dev.error().describe();
  auto tc = store->upsert_toolchain({0, "emulate", "g++ (Debian 12.2.0-14) 12.2.0", ""});
  EXPECT_TRUE(tc) << tc.error().describe();
  EXPECT_TRUE(store->put_code_object("h2", "so", std::vector<std::byte>{std::byte{0x7f}}));
  // Keys are enforced again after the migration: a measurement of no device is refused.
  EXPECT_FALSE(store->add_measurement([] {
    MeasurementRecord m;
    m.run_id = 1;
    m.variant_id = 5;
    m.problem_id = 1;
    m.device_id = 999;  // no such device
    m.tokens = 1;
    m.phase = "short";
    return m;
  }()));
}

// A version-2 file keeps its winner as a forward one; the pass joins the key,
// so a backward winner of the same bucket and kind sits beside it, and the
// filter picks by pass (forward unless asked).
TEST(Migrations, Version2WinnersBecomeForwardAndTakeABackwardBeside) {
  test::ScratchDir dir;
  const std::string path = dir.file("v2.db");
  old_database(path, 2);
  auto store = Store::open(path, OpenMode::existing);
  ASSERT_TRUE(store) << store.error().describe();
  EXPECT_EQ(store->schema_info().value().version, schema_version());
  WinnerRecord backward{.problem_id = 1, .device_id = 7, .tokens = 16, .kind = "moe1", .variant_id = 5, .run_id = 1,
                        .median_us = 30.0, .pass = Pass::backward};
  ASSERT_TRUE(store->set_winner(backward));
  backward.median_us = 20.0;  // a second set replaces the backward winner, not the forward one
  ASSERT_TRUE(store->set_winner(backward));
  struct Case {
    std::optional<Pass> filter;
    std::vector<std::pair<Pass, double>> rows;
  };
  for (const Case& c : std::vector<Case>{{Pass::forward, {{Pass::forward, 12.5}}},
                                         {Pass::backward, {{Pass::backward, 20.0}}},
                                         {std::nullopt, {{Pass::forward, 12.5}, {Pass::backward, 20.0}}}}) {
    WinnerFilter f;
    f.pass = c.filter;
    auto rows = store->winners(f);
    ASSERT_TRUE(rows) << rows.error().describe();
    std::vector<std::pair<Pass, double>> got;
    for (const WinnerRow& r : *rows) got.emplace_back(r.winner.pass, r.winner.median_us);
    EXPECT_EQ(got, c.rows) << (c.filter ? to_string(*c.filter) : "every pass");
  }
  EXPECT_EQ(store->winners().value().size(), 1u);  // the default filter: forward
}

TEST(Migrations, FreshDatabaseIsMarkedAndVersioned) {
  test::ScratchDir dir;
  auto store = Store::open(dir.file("fresh.db"));
  ASSERT_TRUE(store) << store.error().describe();
  auto info = store->schema_info();
  ASSERT_TRUE(info) << info.error().describe();
  EXPECT_EQ(info->application_id, kApplicationId);
  EXPECT_EQ(info->version, schema_version());
  EXPECT_EQ(info->supported, schema_version());
  EXPECT_EQ(info->journal_mode, "wal");
  ASSERT_EQ(info->migrations.size(), static_cast<std::size_t>(schema_version()));
  EXPECT_EQ(info->migrations[0].name, "0001_create_tables");
  EXPECT_FALSE(info->migrations[0].applied_at.empty());
}

}  // namespace
}  // namespace ft::db
