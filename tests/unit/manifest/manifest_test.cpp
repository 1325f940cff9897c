// The manifest library (manifest/manifest.hpp): the bucket rule, the encoding
// of the exported H200 database read back field for field, and the refusals
// of its decoding, table-driven.
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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
  for (const Refusal& c : cases) {
    json j = ex.manifest;
    c.mutate(j);
    auto m = manifest::decode(j);
    ASSERT_FALSE(m) << c.what;
    EXPECT_EQ(m.error().code, Errc::invalid_input) << c.what;
    EXPECT_NE(m.error().message.find(c.message), std::string::npos) << c.what << ": " << m.error().describe();
    EXPECT_EQ(m.error().describe().find('\n'), std::string::npos) << c.what;
  }
}

}  // namespace
}  // namespace ft
