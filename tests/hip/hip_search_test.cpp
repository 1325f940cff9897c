// flytune search, export and check-export through the HIP path on the HIP
// test double, as the real binary: the search compiles the target's variants
// with the real AMD toolchain (clang-19 for gfx942, clang-22 for gfx950),
// its worker (`flytune worker --device hip:N`) loads those code objects into
// the double, which checks every launch against their AMDGPU metadata and
// runs the emulator's build of the same variants; the winners land in SQLite,
// export checks them through the runtime's HIP path, and check-export runs
// them again on the GPU. One variant per stage and one bucket: about 15 s a
// target cold, a few warm (the compile caches live in the build tree).
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "compile/toolchain/toolchains.hpp"
#include "generator/target.hpp"
#include "store/store.hpp"
#include "tests/hip/hip_search_support.hpp"
#include "tests/support/run_flytune.hpp"
#include "tests/unit/store/db_test_support.hpp"

namespace ft {
namespace {

using nlohmann::json;

struct TargetCase {
  const char* target;
  const char* device;  // the double's GPU of that target (FLYTUNE_HIP_DOUBLE_GPUS=gfx942,gfx950)
  const char* space;   // one stage-1 and one stage-2 variant
  const char* product;
};

const TargetCase kCases[] = {
    {"gfx942", "hip:0", "small;atom=mfma_f32_16x16x16_bf16;tile_m=32;split_k=1", "MI300X"},
    {"gfx950", "hip:1", "small;atom=mfma_f32_16x16x32_bf16;tile_m=32;split_k=1", "MI355X"},
};

void PrintTo(const TargetCase& c, std::ostream* os) { *os << c.target << " on " << c.device; }

class HipSearch : public ::testing::TestWithParam<TargetCase> {};

// What the database of a search on the double must hold: the double's GPU as
// a HIP device named emulated, real code objects (hsaco), both stages
// verified on the odd T, timings with their spread, a layer winner per bucket.
void expect_recorded(const std::string& path, const TargetCase& c) {
  auto s = db::Store::open(path, db::OpenMode::read_only);
  ASSERT_TRUE(s) << s.error().describe();
  auto devices = s->devices();
  ASSERT_TRUE(devices && devices->size() == 1u);
  EXPECT_EQ(devices->front().runtime, "hip");
  EXPECT_EQ(devices->front().arch, c.target);
  EXPECT_NE(devices->front().name.find(std::string(c.product) + " (emulated by the flytune HIP double)"), std::string::npos)
      << devices->front().name;
  auto variants = s->variants();
  ASSERT_TRUE(variants);
  std::size_t stages = 0;
  for (const db::VariantRecord& v : *variants) {
    if (v.kind == "layer") continue;
    auto format = s->code_object_format(v.code_object_hash);
    ASSERT_TRUE(format && *format) << v.kernel_name;
    EXPECT_EQ(**format, "hsaco") << v.kernel_name;
    stages += v.kind != "support";
  }
  EXPECT_EQ(stages, 2u);
  auto ms = s->measurements();
  ASSERT_TRUE(ms);
  std::map<std::string, int> ok;
  for (const db::MeasurementRecord& m : *ms) {
    SCOPED_TRACE(m.phase);
    EXPECT_EQ(m.pci_bus_id, fmt::format("hip-double:{}:{}", c.target, c.device[4] - '0'));
    ASSERT_EQ(m.status, db::MeasurementStatus::ok) << m.error_message;
    ++ok[m.phase];
    if (m.phase == "verify") {
      ASSERT_TRUE(m.rel_l2_err);
      EXPECT_LE(*m.rel_l2_err, 8e-3);
      EXPECT_EQ(m.tokens, 333);
    } else {
      ASSERT_TRUE(m.median_us && m.p10_us && m.p90_us);
      EXPECT_GT(*m.p10_us, 0);
      EXPECT_LE(*m.p10_us, *m.median_us);
      EXPECT_LE(*m.median_us, *m.p90_us);
    }
  }
  EXPECT_EQ(ok["verify"], 2);
  EXPECT_EQ(ok["short"], 2);
  EXPECT_EQ(ok["layer"], 1);
}

TEST_P(HipSearch, SearchesExportsAndChecksThroughTheHipPath) {
  const TargetCase& c = GetParam();
  test::skip_unless_buildable(c.target);
  if (IsSkipped() || HasFatalFailure()) return;
  test::ScratchDir dir;
  const test::HipDoubleEnv env(c.space);
  const std::string db = dir.file("amd.db");
  auto r = test::run_flytune({"search", "--target", c.target, "--device", c.device, "--problem", "tiny", "--space", c.space,
                              "--tokens", "1", "--seed", "7", "--no-baseline", "--db", db, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json sum = test::summary_of(r.output);
  ASSERT_TRUE(sum.is_object()) << r.output;
  EXPECT_EQ(sum["device"], fmt::format("AMD Instinct {} (emulated by the flytune HIP double) ({})", c.product, c.target));
  ASSERT_EQ(sum["targets"].size(), 1u);
  EXPECT_NE(sum["targets"][0]["backend"], "emulate");  // the real toolchain built what the double loads
  EXPECT_EQ(sum["targets"][0]["verified"], 2);
  EXPECT_EQ(sum["targets"][0]["crashed"], 0);
  EXPECT_EQ(sum["gpus"][0]["crashes"], 0);
  EXPECT_EQ(sum["winners"].size(), 3u);
  expect_recorded(db, c);

  // The export is checked through the runtime on the GPU of its target
  // (gfx950's is hip:1: the runtime picks it, not hip:0's gfx942).
  const std::string out = dir.file("export");
  auto e = test::run_flytune({"export", "--db", db, "--out", out, "--check-tokens", "1,7", "--check-routing", "uniform"});
  ASSERT_EQ(e.exit_code, 0) << e.output;
  EXPECT_NE(e.output.find(fmt::format("checked through the runtime on AMD Instinct {} (emulated", c.product)),
            std::string::npos)
      << e.output;
  std::ifstream mf(out + "/manifest.json");
  const json manifest = json::parse(mf, nullptr, false);
  ASSERT_TRUE(manifest.is_object());
  EXPECT_EQ(manifest["code_object_format"], "hsaco");
  EXPECT_EQ(manifest["target"], c.target);

  auto k = test::run_flytune({"check-export", out, "--device", c.device, "--tokens", "1,7", "--routing", "uniform,one-empty"});
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_NE(k.output.find("checks passed on AMD Instinct"), std::string::npos) << k.output;
  EXPECT_EQ(k.output.find("rebuilt for the emulator"), std::string::npos) << "the export's own code objects ran: " << k.output;
}

INSTANTIATE_TEST_SUITE_P(Targets, HipSearch, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.target); });

}  // namespace
}  // namespace ft
