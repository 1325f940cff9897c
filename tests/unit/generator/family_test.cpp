// The kernel-family registry (generator/family.hpp): what every family must
// declare, that spellings and tokens are consistent across families, that the
// generic name / JSON / --space machinery round-trips every variant, that
// recorded databases keep their kernel names, and the default spaces as
// golden lists (refresh with FLYTUNE_UPDATE_GOLDEN=1).
#include "generator/family.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "store/store.hpp"
#include "generator/families/families.hpp"
#include "generator/space.hpp"

namespace ft {
namespace {

Problem mixtral() { return *problem_from_preset("mixtral-8x7b"); }

// The keys the layer program and the shared templates read from every stage
// family (Family::launch, Family::contract, the Config of ft::Stage1/Stage2).
constexpr std::string_view kStandardKeys[] = {"atom",   "tile_m",           "tile_n",          "tile_k",
                                              "warps",  "stages",           "warp_specialized", "tiles_per_block",
                                              "weight_in_stage1", "layout", "split_k",          "reduce"};

TEST(Families, EveryFamilyDeclaresTheStandardAxesOnce) {
  ASSERT_GE(all_families().size(), 2u);
  std::set<std::string_view> ids;
  for (const Family* f : all_families()) {
    EXPECT_TRUE(ids.insert(f->id()).second) << "two families named " << f->id();
    EXPECT_EQ(find_family(f->id()), f);
    std::set<std::string_view> keys;
    for (const Axis& a : f->axes()) {
      EXPECT_TRUE(keys.insert(a.key).second) << f->id() << ": axis " << a.key << " twice";
      EXPECT_TRUE(a.token) << f->id() << ": axis " << a.key << " has no name token";
      // An opt-in axis (its family searched only where --space gives values) alone has none.
      if (a.type != AxisType::atom && !a.from_problem) {
        EXPECT_EQ(a.defaults.empty(), a.opt_in) << f->id() << ": " << a.key << (a.opt_in ? " is opt-in but has" : " has no") << " default values";
      }
    }
    for (std::string_view k : kStandardKeys) EXPECT_LT(f->index_of(k), f->axes().size()) << f->id() << " lacks " << k;
    EXPECT_EQ(f->axes().front().type, AxisType::atom) << f->id() << ": the atom comes first (the space sets it)";
  }
}

// Every atom has a family, the first that takes it (a record naming none
// reads as that one); only the one-launch family shares atoms, the tiled
// family's 16-bit ones.
TEST(Families, EveryAtomHasAFamilyAndSharesOnlyWithTheOneLaunchFamily) {
  for (const AtomInfo& a : all_atoms()) {
    std::vector<const Family*> takers;
    for (const Family* f : all_families())
      if (f->takes(a)) takers.push_back(f);
    ASSERT_FALSE(takers.empty()) << a.id;
    EXPECT_EQ(family_of(a), takers.front()) << a.id;
    EXPECT_NE(takers.front(), &onelaunch_family()) << a.id;
    const bool shared = takers.front() == &tiled_family() && a.operand_bytes() == 2;
    EXPECT_EQ(takers.size(), shared ? 2u : 1u) << a.id;
  }
}

TEST(Families, SharedSpellingsMeanTheSameAxis) {
  std::map<std::string_view, const Axis*> seen;
  for (const Family* f : all_families())
    for (const Axis& a : f->axes()) {
      if (a.spelling.empty()) continue;
      auto [it, first] = seen.emplace(a.spelling, &a);
      if (first) continue;
      EXPECT_EQ(it->second->type, a.type) << a.spelling;
      EXPECT_EQ(it->second->names, a.names) << a.spelling;
      EXPECT_EQ(it->second->key, a.key) << a.spelling;
    }
  EXPECT_EQ(seen.size() + 1, space_axis_spellings().size());  // + kind
}

// Every preset value of every settable axis parses back from its --space form.
TEST(Families, PresetValuesRoundTripThroughTheirSpelling) {
  for (const Family* f : all_families())
    for (const Axis& a : f->axes()) {
      if (a.spelling.empty() || a.type == AxisType::atom) continue;
      for (Preset p : {Preset::default_, Preset::wide, Preset::small})
        for (AxisValue x : a.preset(p)) {
          auto back = a.parse(a.format(x));
          ASSERT_TRUE(back) << f->id() << " " << a.spelling << " " << a.format(x) << ": " << back.error().describe();
          EXPECT_EQ(*back, x) << f->id() << " " << a.spelling;
          auto o = SpaceOptions::parse(fmt::format("{}={}", a.spelling, a.format(x)));
          ASSERT_TRUE(o) << o.error().describe();
          EXPECT_EQ(o->values(a), std::vector<AxisValue>{x});
        }
    }
}

// Name, JSON and Config are generic: every variant of the wide space of every
// target has a distinct name and survives a JSON round trip unchanged.
TEST(Families, WideSpaceNamesAreDistinctAndJsonRoundTrips) {
  for (const Target& t : all_targets()) {
    Space s = enumerate_space(t, mixtral(), SpaceOptions::wide());
    std::set<std::string> names;
    for (const std::vector<Variant>* vs : {&s.legal}) {
      for (const Variant& v : *vs) {
        ASSERT_TRUE(names.insert(v.name()).second) << "duplicate " << v.name();
        auto back = Variant::from_json(v.to_json());
        ASSERT_TRUE(back) << v.name() << ": " << back.error().describe();
        EXPECT_TRUE(*back == v) << v.name();
      }
    }
    for (const Rejection& r : s.rejected) {
      auto back = Variant::from_json(r.variant.to_json());
      ASSERT_TRUE(back) << r.variant.name() << ": " << back.error().describe();
      EXPECT_EQ(back->name(), r.variant.name());
    }
  }
}

TEST(Families, VariantOfTakesTheAtomsFamilyAtInitialValues) {
  const Target& sm90 = *find_target("sm_90a");
  Variant w = Variant::of(sm90, StageRole::stage2, *find_atom("wgmma_m64k16_f32_bf16"));
  EXPECT_EQ(w.family, &wgmma_family());
  EXPECT_EQ(w.role, StageRole::stage2);
  EXPECT_EQ(w.values.size(), wgmma_family().axes().size());
  Variant m = Variant::of(sm90, StageRole::stage1, *find_atom("mma_m16n8k16_f32_bf16"));
  EXPECT_EQ(m.family, &tiled_family());
  EXPECT_EQ(m.get("warps_m"), 2);
  m.set("warps_n", 4);
  EXPECT_EQ(m.get("warps"), pack_pair(2, 4));
  EXPECT_EQ(m.get("warps_m"), 2);
  EXPECT_FALSE(m.has("no_such_axis"));
}

TEST(Families, RecordsWithoutAFamilyTakeTheAtomsOne) {
  Variant v = *default_variant(*find_target("sm_90a"), mixtral(), StageRole::stage2);
  nlohmann::json j = v.to_json();
  ASSERT_EQ(j.at("family"), "tiled");
  j.erase("family");
  auto back = Variant::from_json(j);
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_TRUE(*back == v);
  j["family"] = "nosuch";
  EXPECT_FALSE(Variant::from_json(j));
  j.erase("family");
  j.erase("tile_m");
  auto missing = Variant::from_json(j);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("tile_m"), std::string::npos) << missing.error().message;
  j["tile_m"] = "sixty-four";
  EXPECT_FALSE(Variant::from_json(j));
}

// The names recorded on the H200 by earlier flytune versions (the variants'
// parameters as they wrote them) come back unchanged: databases, exports and
// goldens keep their keys across the redesign.
TEST(Families, RecordedDatabasesKeepTheirKernelNames) {
  int checked = 0;
  for (const char* file : {"h200.db", "tiny_forms.db"}) {
    auto store = db::Store::open(std::string(FT_TEST_DATA_DIR) + "/" + file, db::OpenMode::read_only);
    ASSERT_TRUE(store) << file << ": " << store.error().describe();
    auto rows = store->variants();
    ASSERT_TRUE(rows) << rows.error().describe();
    for (const db::VariantRecord& r : *rows) {
      if (r.kind != "moe1" && r.kind != "moe2") continue;  // support units have no parameters
      auto v = Variant::from_json(r.params);
      ASSERT_TRUE(v) << file << " " << r.kernel_name << ": " << v.error().describe();
      EXPECT_EQ(v->name(), r.kernel_name) << file;
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
}

std::string space_listing(const Target& t) {
  std::string out;
  const Space s = enumerate_space(t, mixtral(), SpaceOptions{});
  for (const Variant& v : s.legal) out += v.name() + "\n";
  for (const Rejection& r : s.rejected) out += fmt::format("rejected {}: {}\n", r.variant.name(), r.reason);
  return out;
}

class DefaultSpaceGolden : public ::testing::TestWithParam<const char*> {};

// The default space of each target for Mixtral, names and rejections in
// enumeration order: a change to any family's axes, presets or rules shows up
// as a diff in tests/golden/space/.
TEST_P(DefaultSpaceGolden, MatchesTheRecordedList) {
  const Target& t = *find_target(GetParam());
  const std::string path = fmt::format("{}/tests/golden/space/mixtral-8x7b_{}.txt", FT_TEST_SOURCE_DIR, t.name);
  const std::string text = space_listing(t);
  if (const char* u = std::getenv("FLYTUNE_UPDATE_GOLDEN"); u && std::string(u) == "1") {
    std::ofstream(path) << text;
    return;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing golden file " << path << " (run with FLYTUNE_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), text) << "the default space of " << t.name << " changed; if intended, refresh with FLYTUNE_UPDATE_GOLDEN=1";
}

INSTANTIATE_TEST_SUITE_P(Targets, DefaultSpaceGolden, ::testing::Values("gfx90a", "gfx942", "gfx950", "sm_90a"));

}  // namespace
}  // namespace ft
