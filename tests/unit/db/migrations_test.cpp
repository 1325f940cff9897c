// Migrations: contiguous numbers from 1, well-formed names, and a fresh
// database whose schema matches the golden file tests/data/schema_vN.sql
// (FLYTUNE_UPDATE_GOLDEN=1 rewrites it).
#include <cstdlib>
#include <regex>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "db/migrations.hpp"
#include "db/store.hpp"
#include "tests/unit/db/db_test_support.hpp"

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
