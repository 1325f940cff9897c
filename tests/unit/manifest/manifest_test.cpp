// The manifest library (manifest/manifest.hpp): the bucket rule, the encoding
// of the exported H200 database read back field for field, and the refusals
// of its decoding, table-driven.
#include <algorithm>
#include <functional>
#include <stdexcept>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/backward_gemm.hpp"
#include "layer/backward.hpp"
#include "manifest/manifest.hpp"
#include "tests/unit/export/export_test_support.hpp"

namespace ft {
namespace {

using nlohmann::json;

TEST(Manifest, SelectBucketIsNextUpElseLargest) {
  const std::vector<int> b{1, 16, 64, 512, 4096, 16384};
  const std::vector<std::pair<int, int>> cases{{1, 1}, {5, 16}, {64, 64}, {700, 4096}, {16385, 16384}};
  for (const auto& [tokens, bucket] : cases) EXPECT_EQ(b[manifest::select_bucket(b, tokens)], bucket) << "T=" << tokens;
  EXPECT_EQ(manifest::select_bucket(std::vector<int>{8}, 1), 0u);
}

// Decoding the manifest export wrote and encoding it again gives the same
// JSON: every field export writes has its member (or is computed again from
// the code, as the argument layouts and the program's buffers are).
TEST(Manifest, EncodeOfDecodeIsTheExportedManifest) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  auto m = manifest::decode(ex.manifest);
  ASSERT_TRUE(m) << m.error().describe();
  EXPECT_EQ(m->problems.size(), 1u);
  EXPECT_EQ(m->problems[0].bucket_for(700).tokens, 4096);
  EXPECT_EQ(manifest::encode(*m), ex.manifest) << json::diff(ex.manifest, manifest::encode(*m)).dump();
  std::set<std::string> files;
  for (const json& s : ex.manifest["support_units"]) files.insert(s["code_object"].get<std::string>());
  for (const json& b : ex.manifest["problems"][0]["buckets"])
    for (const json& s : b["steps"])
      if (s.contains("code_object")) files.insert(s["code_object"].get<std::string>());
  EXPECT_EQ(m->files(), std::vector<std::string>(files.begin(), files.end()));
}

struct Refusal {
  const char* what;
  std::function<void(json&)> mutate;
  const char* message;  // a part of the one line
};

// Each mutant of `good` is refused by decode with its one line.
void expect_refusals(const json& good, const std::vector<Refusal>& cases) {
  for (const Refusal& c : cases) {
    json j = good;
    c.mutate(j);
    auto m = manifest::decode(j);
    ASSERT_FALSE(m) << c.what;
    EXPECT_EQ(m.error().code, Errc::invalid_input) << c.what;
    EXPECT_NE(m.error().message.find(c.message), std::string::npos) << c.what << ": " << m.error().describe();
    EXPECT_EQ(m.error().describe().find('\n'), std::string::npos) << c.what;
  }
}

TEST(Manifest, DecodeRefusesWithOneLine) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  const std::vector<Refusal> cases{
      {"another schema", [](json& j) { j["schema_version"] = manifest::kSchemaVersion + 1; },
       "this runtime reads"},
      {"an array", [](json& j) { j = json::array(); }, "not a JSON object"},
      {"no hidden", [](json& j) { j["problems"][0].erase("hidden"); }, "malformed"},
      {"negative experts", [](json& j) { j["problems"][0]["experts"] = -8; }, "experts -8 must be a positive integer"},
      {"topk above experts", [](json& j) { j["problems"][0]["topk"] = 9; }, "topk exceeds experts"},
      {"unknown format", [](json& j) { j["code_object_format"] = "elf"; }, "unknown code_object_format 'elf'"},
      {"no support unit", [](json& j) { j["support_units"] = json::array(); }, "no support unit for dtype bf16"},
      {"no buckets", [](json& j) { j["problems"][0]["buckets"] = json::array(); }, "has no buckets"},
      {"an edited grid", [](json& j) { j["problems"][0]["buckets"][2]["steps"][3]["grid"][0] = 1; },
       "differ from this runtime's layer program"},
      {"a stage without its code object",
       [](json& j) {
         for (json& s : j["problems"][0]["buckets"][0]["steps"])
           if (s.value("step", "") == "stage1") s.erase("code_object");
       },
       "no step names the code object of"},
  };
  expect_refusals(ex.manifest, cases);
}


// The H200 export's manifest with a backward bucket added to its problem at
// `tokens`: the first configuration of each role that fits the problem, its
// program, a code object named for each configuration.
json with_backward(const json& exported, std::vector<int> tokens) {
  manifest::Manifest m = *manifest::decode(exported);
  manifest::ProblemEntry& p = m.problems[0];
  for (int t : tokens) {
    manifest::Bucket b;
    b.tokens = t;
    b.recipe = {m.target, p.problem, {}};
    b.recipe.wide_align = m.support_for(p.problem.dtype)->wide_align();
    for (const op::GradRole& role : op::moe_backward().grad) {
      const int rm = op::extent(role.m, p.problem.hidden, p.problem.inter), rn = op::extent(role.n, p.problem.hidden, p.problem.inter);
      for (const BackwardVariant& v : backward_space(*m.target, p.problem.dtype, Preset::small, role.gemm))
        if (!why_illegal_for(v, rm, rn)) {
          b.recipe.grad.push_back({role.launch, v});
          break;
        }
    }
    b.program = *build_backward_program(b.recipe, t);
    for (const Step& st : b.program.steps)
      if (st.op == Step::Op::launch)
        b.code_objects[st.symbol] = is_backward(st.role) ? st.symbol + ".cubin" : m.supports[0].code_object;
    b.kernel_name = "backward";
    b.time_us.median = 10.0 * t;
    p.backward.push_back(std::move(b));
  }
  return manifest::encode(m);
}

// A backward bucket: its configurations and steps written, read back to the
// same recipe and program (re-derived by build_backward_program), encoded
// again to the same JSON; its code objects are among the manifest's files.
TEST(Manifest, BackwardBucketsRoundTrip) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  const json j = with_backward(ex.manifest, {1, 64});
  ASSERT_EQ(j["schema_version"], 4);
  ASSERT_EQ(j["problems"][0]["backward"]["buckets"].size(), 2u);
  auto m = manifest::decode(j);
  ASSERT_TRUE(m) << m.error().describe();
  EXPECT_EQ(manifest::encode(*m), j) << json::diff(j, manifest::encode(*m)).dump();
  const manifest::ProblemEntry& p = m->problems[0];
  ASSERT_EQ(p.backward.size(), 2u);
  EXPECT_EQ(p.backward[0].tokens, 1);  // ascending
  EXPECT_EQ(p.backward_for(40)->tokens, 64);
  EXPECT_EQ(p.backward_for(100000)->tokens, 64);
  EXPECT_EQ(p.backward[1].recipe.grad.size(), 4u);
  EXPECT_EQ(&p.backward[1].operation(), &op::moe_backward());
  EXPECT_NE(p.backward[1].program.find("dgrad2"), nullptr);
  // A bucket says which KGroupedArgs its wgrad kernels read (one built here: the struct before c16),
  // and a manifest without the key reads as that struct (an export before the 16-bit weight gradients).
  EXPECT_EQ(p.backward[1].kgrouped_args_bytes, manifest::kKGroupedArgsBeforeC16);
  json older = j;
  for (json& b : older["problems"][0]["backward"]["buckets"]) {
    ASSERT_TRUE(b.contains("kgrouped_args_bytes"));
    b["kgrouped_args_bytes"] = 96;
  }
  auto newer = manifest::decode(older);
  ASSERT_TRUE(newer) << newer.error().describe();
  EXPECT_EQ(newer->problems[0].backward[0].kgrouped_args_bytes, 96u);
  for (json& b : older["problems"][0]["backward"]["buckets"]) b.erase("kgrouped_args_bytes");
  auto before = manifest::decode(older);
  ASSERT_TRUE(before) << before.error().describe();
  EXPECT_EQ(before->problems[0].backward[0].kgrouped_args_bytes, manifest::kKGroupedArgsBeforeC16);
  const std::vector<std::string> files = m->files();
  for (const GradStage& g : p.backward[1].recipe.grad)
    EXPECT_TRUE(std::ranges::binary_search(files, g.kernel.name() + ".cubin")) << g.kernel.name();
  // Without a backward the problem encodes no "backward" key and has none.
  auto forward = manifest::decode(ex.manifest);
  ASSERT_TRUE(forward);
  EXPECT_EQ(forward->problems[0].backward_for(64), nullptr);
  EXPECT_FALSE(manifest::encode(*forward)["problems"][0].contains("backward"));
}

TEST(Manifest, DecodeRefusesABadBackwardWithOneLine) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  const json good = with_backward(ex.manifest, {64});
  auto step = [](json& j, const std::string& name) -> json& {
    for (json& s : j["problems"][0]["backward"]["buckets"][0]["steps"])
      if (s.value("step", "") == name) return s;
    throw std::logic_error("no step " + name);
  };
  const std::vector<Refusal> cases{
      {"an edited backward grid", [&](json& j) { step(j, "dgrad1")["grid"][0] = 1; }, "differ from this runtime's backward program"},
      {"dgrad2 bound to another copy of W2", [&](json& j) { step(j, "dgrad2")["args"]["w2"] = "w2_shuffled"; },
       "differ from this runtime's backward program"},
      {"no clear of dx", [&](json& j) { j["problems"][0]["backward"]["buckets"][0]["steps"].erase(1); }, "differ"},
      {"a configuration without its code object", [&](json& j) { step(j, "dgrad1").erase("code_object"); },
       "no step names the code object of"},
      {"an unknown op", [](json& j) { j["problems"][0]["backward"]["buckets"][0]["stages"]["dgrad1"]["op"] = "dgrad9"; },
       "unknown op"},
      {"a role missing", [](json& j) { j["problems"][0]["backward"]["buckets"][0]["stages"].erase("wgrad1"); }, "malformed"},
      {"another operation", [](json& j) { j["problems"][0]["backward"]["operation"] = "moe_forward"; },
       "backward operation 'moe_forward'"},
      {"no backward buckets", [](json& j) { j["problems"][0]["backward"]["buckets"] = json::array(); }, "its backward has no buckets"},
      {"two buckets of one T",
       [](json& j) {
         json& b = j["problems"][0]["backward"]["buckets"];
         b.push_back(b[0]);
       },
       "two backward buckets of T=64"},
  };
  ASSERT_TRUE(manifest::decode(good)) << manifest::decode(good).error().describe();
  expect_refusals(good, cases);
}

}  // namespace
}  // namespace ft
