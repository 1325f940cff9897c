// The store's kinds (store/kind.hpp) and a layer winner's typed record
// (store/layer_record.hpp): the database text each kind keeps, the params a
// layer row holds read back member for member, and the refusals of a row that
// lacks or disagrees with them, table-driven.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/space.hpp"
#include "store/kind.hpp"
#include "store/layer_record.hpp"

namespace ft::db {
namespace {

using nlohmann::json;

TEST(Kind, KeepsTheDatabaseText) {
  const std::vector<std::pair<Kind, const char*>> rows{
      {Kind::moe1, "moe1"}, {Kind::moe2, "moe2"}, {Kind::layer, "layer"},
      {Kind::support, "support"}, {Kind::grad, "grad"}, {Kind::backward, "backward"}};
  for (const auto& [kind, text] : rows) {
    EXPECT_EQ(to_string(kind), text);
    EXPECT_EQ(parse_kind(text), kind) << text;
    EXPECT_TRUE(is(text, kind)) << text;
  }
  for (const char* other : {"", "Layer", "stage1", "align"}) EXPECT_FALSE(parse_kind(other)) << other;
  for (StageRole r : kStageRoles) EXPECT_EQ(to_string(kind_of(r)), to_string(r));
}

TEST(Pass, KeepsTheDatabaseText) {
  for (const auto& [pass, text] : std::vector<std::pair<Pass, const char*>>{{Pass::forward, "forward"}, {Pass::backward, "backward"}}) {
    EXPECT_EQ(to_string(pass), text);
    EXPECT_EQ(parse_pass(text), pass) << text;
  }
  for (const char* other : {"", "Forward", "both", "layer"}) EXPECT_FALSE(parse_pass(other)) << other;
}

Variant stage(StageRole role, int tile_m) {
  Variant v = Variant::of(*find_target("sm_90a"), role, *find_atom("mma_m16n8k16_f32_bf16"));
  v.set("tile_m", tile_m);
  v.set("tile_n", 64);
  v.set("tile_k", 32);
  v.set("warps_m", 2);
  v.set("warps_n", 2);
  v.set("stages", 2);
  return v;
}

TEST(LayerRecord, ParamsReadBackAsTheStageVariants) {
  const Variant s1 = stage(StageRole::stage1, 32), s2 = stage(StageRole::stage2, 64);
  const LayerRecord r = LayerRecord::of(s1, s2);
  EXPECT_EQ(r.kernel_name(), s1.name() + "+" + s2.name());
  const json params = r.to_params();
  EXPECT_EQ(params["stage1_kernel"], s1.name());  // the database's member names
  EXPECT_EQ(params["stage2"], s2.to_json());
  auto back = LayerRecord::from_params(params);
  ASSERT_TRUE(back) << back.error().describe();
  EXPECT_EQ(back->to_params(), params);
  auto stages = back->variants();
  ASSERT_TRUE(stages) << stages.error().describe();
  EXPECT_TRUE(back->check_names(stages->first, stages->second));
  EXPECT_EQ(stages->first.name(), s1.name());
  EXPECT_EQ(stages->second.name(), s2.name());
}

struct Refusal {
  const char* what;
  std::function<void(json&)> mutate;
  const char* message;
};

TEST(LayerRecord, RefusesARowThatLacksOrDisagrees) {
  const json good = LayerRecord::of(stage(StageRole::stage1, 32), stage(StageRole::stage2, 64)).to_params();
  const std::vector<Refusal> cases{
      {"not an object", [](json& j) { j = json::array(); }, "lacks stage1/stage2"},
      {"no stage2", [](json& j) { j.erase("stage2"); }, "lacks stage1/stage2"},
      {"no stage1_kernel", [](json& j) { j.erase("stage1_kernel"); }, "lacks stage1/stage2"},
      {"a numeric kernel", [](json& j) { j["stage2_kernel"] = 7; }, "are not names"},
      {"another stage-1 name", [](json& j) { j["stage1_kernel"] = "ft_other"; }, "the row says ft_other"},
  };
  for (const Refusal& c : cases) {
    json j = good;
    c.mutate(j);
    auto r = LayerRecord::from_params(j);
    Status v = r ? Status{} : Status(std::unexpected(r.error()));
    if (r) {
      auto stages = r->variants();
      ASSERT_TRUE(stages) << c.what << ": " << stages.error().describe();
      v = r->check_names(stages->first, stages->second);
    }
    ASSERT_FALSE(v) << c.what;
    EXPECT_EQ(v.error().code, Errc::database) << c.what;
    EXPECT_NE(v.error().message.find(c.message), std::string::npos) << c.what << ": " << v.error().describe();
  }
}

}  // namespace
}  // namespace ft::db
