// flytune export on the recorded H200 database (tests/data/h200.db): manifest,
// code objects by hash, the dispatch header, refusals, coverage.
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "export/export.hpp"
#include "layer/program.hpp"
#include "generator/variant.hpp"
#include "tests/unit/store/db_test_support.hpp"
#include "tests/unit/export/export_test_support.hpp"
#include "system/hash.hpp"
#include "system/subprocess.hpp"
#include "layer/device_structs.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A copy of tests/data/h200.db in `dir`, `sql` applied to it.
std::string h200_with(const test::ScratchDir& dir, const std::string& name, const std::string& sql) {
  const std::string db = dir.file(name);
  fs::copy_file(test::h200_db(), db);
  test::raw_sql(db, sql);
  return db;
}

// The SQL that sets `path` of the T=4096 layer winner's parameters to `value`.
std::string set_layer_4096(const std::string& path, const std::string& value) {
  return fmt::format("UPDATE variants SET params_json = json_set(params_json, '{}', {}) WHERE kind = 'layer' AND id = "
                     "(SELECT variant_id FROM winners WHERE kind = 'layer' AND tokens = 4096);",
                     path, value);
}

TEST(Export, H200ManifestCodeObjectsExistAndHashToTheirNames) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  const json& m = ex.manifest;
  EXPECT_EQ(m["schema_version"], 4);
  EXPECT_EQ(m["target"], "sm_90a");
  EXPECT_EQ(m["code_object_format"], "cubin");
  EXPECT_EQ(m["device"]["name"], "NVIDIA H200");
  EXPECT_EQ(m["args"]["size"], 208);
  ASSERT_EQ(m["problems"].size(), 1u);
  const json& p = m["problems"][0];
  EXPECT_EQ(p["key"], "moe_e8_h4096_i14336_k2_bf16_swiglu_uniform");
  std::vector<int> buckets;
  for (const json& b : p["buckets"]) buckets.push_back(b["tokens"]);
  EXPECT_EQ(buckets, (std::vector<int>{1, 16, 64, 512, 4096, 16384}));

  std::set<std::string> files;
  for (const json& s : m["support_units"]) files.insert(s["code_object"].get<std::string>());
  for (const json& b : p["buckets"]) {
    std::vector<std::string> order;
    for (const json& s : b["steps"]) {
      order.push_back(s["step"]);
      if (s["op"] == "launch") files.insert(s["code_object"].get<std::string>());
    }
    // Above kWideAlignPairs pairs the layer aligns in two wide launches.
    if ((long long)b["tokens"].get<int>() * p["topk"].get<int>() > kWideAlignPairs)
      EXPECT_EQ(order, (std::vector<std::string>{"clear_y_acc", "align_count", "align_scatter", "stage1", "stage2", "reduce"}));
    else
      EXPECT_EQ(order, (std::vector<std::string>{"clear_y_acc", "align", "stage1", "stage2", "reduce"}));
    EXPECT_TRUE(b["time_us"]["p10"].is_number() && b["time_us"]["p90"].is_number());
  }
  EXPECT_GE(files.size(), 3u);
  for (const std::string& f : files) {
    const fs::path path = fs::path(ex.dir) / f;
    ASSERT_TRUE(fs::exists(path)) << f;
    const std::string bytes = test::read_bytes(path.string());
    EXPECT_EQ(xxh3_128_hex(bytes) + ".cubin", f);
  }
  EXPECT_TRUE(fs::exists(fs::path(ex.dir) / "flytune_dispatch.h"));
}

// Each bucket's steps are the layer program's for its stage variants at the
// bucket's T (what the search timed and the runtime checks at open), each
// launch naming its code object; the args layout is ft::MoeArgs itself.
TEST(Export, StepsAreTheLayerProgramsAndArgsLayoutIsMoeArgs) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  const json& p = ex.manifest["problems"][0];
  Problem prob;
  prob.experts = p["experts"];
  prob.hidden = p["hidden"];
  prob.inter = p["inter"];
  prob.topk = p["topk"];
  for (const json& b : p["buckets"]) {
    auto v1 = Variant::from_json(b["stages"]["stage1"]);
    auto v2 = Variant::from_json(b["stages"]["stage2"]);
    ASSERT_TRUE(v1 && v2);
    auto prog = build_program(LayerRecipe{v1->target, prob, {*v1, *v2}}, b["tokens"].get<int>());
    ASSERT_TRUE(prog) << prog.error().describe();
    json recorded = b["steps"];
    for (json& st : recorded) {
      if (st["op"] != "launch") continue;
      EXPECT_TRUE(st["code_object"].get<std::string>().ends_with(".cubin")) << st;
      st.erase("code_object");
    }
    EXPECT_EQ(recorded, steps_json(*prog)) << "T=" << b["tokens"];
    EXPECT_EQ(b["align_block"], prog->align_block);
    const std::size_t s1 = prog->index_of("stage1");
    EXPECT_EQ(b["steps"][s1]["symbol"], v1->name());
    if (const Step* align = prog->find("align")) {
      EXPECT_EQ(b["steps"][prog->index_of("align")]["dynamic_shared"], align_lds_bytes(prob.experts));
      EXPECT_EQ(align->shape.grid_x, 1);
    } else {
      EXPECT_EQ(b["steps"][prog->index_of("align_scatter")]["dynamic_shared"], align_scatter_lds_bytes(prob.experts));
    }
  }
  const json& fields = ex.manifest["args"]["fields"];
  ASSERT_EQ(fields.size(), 31u);
  EXPECT_EQ(fields[0]["name"], "x");
  EXPECT_EQ(fields[11]["name"], "tokens");
  EXPECT_EQ(fields[11]["offset"], offsetof(MoeArgs, tokens));
  EXPECT_EQ(fields[18]["name"], "flags");
  EXPECT_EQ(fields[18]["offset"], 116);
  EXPECT_EQ(fields[19]["name"], "bad_ids");
  EXPECT_EQ(fields[19]["offset"], 120);
  EXPECT_EQ(fields[20]["name"], "x_scale");  // the fp8 fields, appended
  EXPECT_EQ(fields[20]["offset"], 128);
  EXPECT_EQ(fields[27]["name"], "scales");
  EXPECT_EQ(fields[27]["offset"], 184);
  EXPECT_EQ(fields[29]["name"], "inter_scale");  // the static mode's, appended after reserved
  EXPECT_EQ(fields[29]["offset"], 192);
  EXPECT_EQ(fields[30]["name"], "tile_tickets");  // the dynamic tile walks', appended after it
  EXPECT_EQ(fields[30]["offset"], 200);
  const std::string header = test::read_bytes((fs::path(ex.dir) / "flytune_dispatch.h").string());
  EXPECT_NE(header.find("#define FLYTUNE_DISPATCH_COUNT 6"), std::string::npos);
  EXPECT_NE(header.find("#define FLYTUNE_MOE_ARGS_SIZE 208"), std::string::npos);
  EXPECT_NE(header.find(p["buckets"][0]["steps"][2]["symbol"].get<std::string>()), std::string::npos);
}

// ft::ShuffleArgs as the manifest describes it: the host mirror's offsets,
// the layout selector and the reserved word after cols, no gaps.
TEST(Export, ShuffleArgsLayoutHasTheLayoutField) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  const json& args = ex.manifest["shuffle"]["args"];
  EXPECT_EQ(args["struct"], "ft::ShuffleArgs");
  EXPECT_EQ(args["size"], 32);
  EXPECT_EQ(args["size"], sizeof(ShuffleArgs));
  const json& fields = args["fields"];
  ASSERT_EQ(fields.size(), 6u);
  const std::vector<std::string> names{"src", "dst", "rows", "cols", "layout", "reserved"};
  const std::vector<int> offsets{0, 8, 16, 20, 24, 28}, sizes{8, 8, 4, 4, 4, 4};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    EXPECT_EQ(fields[i]["name"], names[i]);
    EXPECT_EQ(fields[i]["offset"], offsets[i]) << names[i];
    EXPECT_EQ(fields[i]["size"], sizes[i]) << names[i];
  }
  EXPECT_EQ(fields[4]["offset"], offsetof(ShuffleArgs, layout));
  EXPECT_EQ(fields[5]["offset"], offsetof(ShuffleArgs, reserved));
  EXPECT_EQ(fields[4]["type"], "i32");
  EXPECT_NE(fields[4]["meaning"].get<std::string>().find("1 shuffled, 2 tiled"), std::string::npos);
  EXPECT_EQ(ex.manifest["shuffle"]["block"][0], kReduceThreads);
}

// weight_layouts documents tiled with the formula of measure/workload/shuffle.hpp
// and templates/ft/weight_layout.hpp; the header repeats it.
TEST(Export, WeightLayoutsDocumentTiled) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  const json& layouts = ex.manifest["weight_layouts"];
  for (const char* name : {"plain", "shuffled", "tiled", "mapped"}) EXPECT_TRUE(layouts.contains(name)) << name;
  EXPECT_EQ(layouts["mapped"]["offset"], layouts["plain"]["offset"]) << "mapped reads the plain weights";
  const json& tiled = layouts["tiled"];
  const std::string formula = "((k >> 6) * rows + row) * 64 + ((((k >> 3) & 7) ^ (row & 7)) << 3) + (k & 7)";
  EXPECT_EQ(tiled["offset"], formula);
  EXPECT_EQ(tiled["requires"], "rows a multiple of 16, cols a multiple of 64");
  EXPECT_EQ(tiled["w1"]["rows"], "experts * 2 * inter");
  EXPECT_EQ(tiled["w1"]["cols"], "hidden");
  EXPECT_EQ(tiled["w2"]["rows"], "experts * hidden");
  EXPECT_EQ(tiled["w2"]["cols"], "inter");
  EXPECT_NE(tiled["meaning"].get<std::string>().find("_tiled_ws"), std::string::npos);
  // Every bucket names layouts the manifest documents.
  for (const json& b : ex.manifest["problems"][0]["buckets"])
    for (const char* w : {"w1", "w2"}) EXPECT_TRUE(layouts.contains(b["weights"][w].get<std::string>())) << b["weights"];
  const std::string header = test::read_bytes((fs::path(ex.dir) / "flytune_dispatch.h").string());
  EXPECT_NE(header.find("tiled weight offset of (row, k) in [rows, cols]: " + formula), std::string::npos);
}

// A layer winner whose stage 2 reads tiled weights (a copy of h200.db with
// its stage-2 kernels renamed and re-described as tiled): the stage step,
// the bucket's weights and the dispatch header say tiled.
TEST(Export, TiledStageIsExportedAsTiled) {
  test::ScratchDir dir;
  const std::string db = dir.file("tiled.db");
  fs::copy_file(test::h200_db(), db);
  test::raw_sql(db,
                "UPDATE variants SET kernel_name = kernel_name || '_tiled', params_json = json_set(params_json, '$.layout', 'tiled') "
                "WHERE kind = 'moe2' AND kernel_name IN "
                "(SELECT json_extract(params_json, '$.stage2_kernel') FROM variants WHERE kind = 'layer');"
                "UPDATE variants SET params_json = json_set(params_json, '$.stage2.layout', 'tiled', '$.stage2_kernel', "
                "json_extract(params_json, '$.stage2_kernel') || '_tiled') WHERE kind = 'layer';");
  auto c = db::build_export({db, "", {}, {}});
  if (!c && c.error().code == Errc::toolchain) GTEST_SKIP() << c.error().describe();
  ASSERT_TRUE(c) << c.error().describe();
  const json& buckets = c->manifest["problems"][0]["buckets"];
  ASSERT_EQ(buckets.size(), 6u);
  for (const json& b : buckets) {
    EXPECT_EQ(b["weights"]["w1"], "plain");
    EXPECT_EQ(b["weights"]["w2"], "tiled");
    auto step_named = [&](const char* name) -> const json& {
      for (const json& s : b["steps"])
        if (s["step"] == name) return s;
      ADD_FAILURE() << "no step " << name;
      return b["steps"][0];
    };
    const json& stage2 = step_named("stage2");
    EXPECT_EQ(stage2["args"]["w2"], "w2_tiled");
    EXPECT_TRUE(stage2["symbol"].get<std::string>().ends_with("_tiled")) << stage2["symbol"];
    EXPECT_EQ(b["stages"]["stage2"]["layout"], "tiled");
    EXPECT_EQ(step_named("stage1")["args"]["w1"], "w1");
  }
  EXPECT_NE(c->dispatch_header.find("_tiled\", \""), std::string::npos);  // the stage-2 symbol
  EXPECT_NE(c->dispatch_header.find("}, \"tiled\", 0}"), std::string::npos);  // its weight_layout, then its flags
}

// The generated header is plain C99 that a C compiler accepts without warnings.
TEST(Export, DispatchHeaderCompilesAsC) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  auto cc = find_executable("cc");
  if (!cc) GTEST_SKIP() << "no C compiler: " << cc.error().describe();
  const std::string src = ex.dir + "/use_header.c";
  test::write_bytes(src, "#include \"flytune_dispatch.h\"\n"
                         "int main(void) { return flytune_dispatch_table[FLYTUNE_DISPATCH_COUNT - 1].tokens == 16384 ? 0 : 1; }\n");
  auto r = run_capture({*cc, "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-I", ex.dir, src, "-o", ex.dir + "/use_header"},
                       {}, std::chrono::seconds(60));
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->exit_code, 0) << r->output;
  auto run = run_capture({ex.dir + "/use_header"}, {}, std::chrono::seconds(10));
  ASSERT_TRUE(run);
  EXPECT_EQ(run->exit_code, 0);
}

TEST(Export, LeavesTheDatabaseUntouched) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  EXPECT_EQ(xxh3_128_hex(test::read_bytes(test::h200_db())), ex.db_hash_before);
}

TEST(Export, MissingDatabaseIsRefused) {
  test::ScratchDir dir;
  auto r = db::export_winners({dir.file("none.db"), dir.file("out"), {}, {}});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no such database"), std::string::npos) << r.error().describe();
  EXPECT_FALSE(fs::exists(dir.file("out")));
}

// An export goes to a staging folder first: a folder that holds files is
// refused without --force; with it, the new export replaces the old contents
// whole (no stale code object beside the new manifest); a failing check
// leaves the folder as it was.
TEST(Export, NeverMixesExportsAndACheckFailureWritesNothing) {
  const test::SharedExport& ex = test::shared_h200_export();
  if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
  ASSERT_TRUE(ex.error.empty()) << ex.error;
  test::ScratchDir dir;
  const std::string out = dir.file("out");
  fs::create_directories(out);
  test::write_bytes(out + "/stale.cubin", "old");
  test::write_bytes(out + "/manifest.json", "{}");
  auto refused = db::export_winners({test::h200_db(), out, {}, {}});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::usage);
  EXPECT_NE(refused.error().message.find("--force"), std::string::npos) << refused.error().describe();
  EXPECT_EQ(test::read_bytes(out + "/stale.cubin"), "old");

  db::ExportOptions failing{test::h200_db(), out, {}, {}, true};
  int checked = 0;
  failing.check = [&](const std::string& staged) -> Status {
    ++checked;
    EXPECT_TRUE(fs::exists(staged + "/manifest.json"));
    EXPECT_NE(staged, out);
    return fail(Errc::verify, "a bucket failed");
  };
  auto f = db::export_winners(failing);
  ASSERT_FALSE(f);
  EXPECT_EQ(checked, 1);
  EXPECT_EQ(test::read_bytes(out + "/manifest.json"), "{}");
  EXPECT_TRUE(fs::exists(out + "/stale.cubin"));

  db::ExportOptions forced{test::h200_db(), out, {}, {}, true};
  auto ok = db::export_winners(forced);
  ASSERT_TRUE(ok) << ok.error().describe();
  EXPECT_FALSE(fs::exists(out + "/stale.cubin"));
  EXPECT_NE(test::read_bytes(out + "/manifest.json"), "{}");
  std::set<std::string> left, want;
  for (const auto& e : fs::directory_iterator(out)) left.insert(e.path().filename().string());
  for (const auto& e : fs::directory_iterator(ex.dir)) {  // other tests leave their own files in the shared export
    const std::string name = e.path().filename().string();
    if (name == "manifest.json" || name == "flytune_dispatch.h" || name.ends_with(".cubin")) want.insert(name);
  }
  EXPECT_EQ(left, want);
  for (const auto& e : fs::directory_iterator(dir.file(""))) EXPECT_EQ(e.path().filename().string().find(".out.staging"), std::string::npos);
}

// A layer winner recorded before the program's rules -- stage tiles of 128 and
// 192 rows, whose blocks do not line up -- is left out with a note, not
// exported to run wrong.
TEST(Export, LeavesOutAPairTheProgramCannotRunAndSaysSo) {
  test::ScratchDir dir;
  const std::string db = h200_with(dir, "bad_pair.db", set_layer_4096("$.stage1.tile_m", "192"));
  db::ExportOptions o{db, "", {}, {}};
  auto refused = db::build_export(o);
  if (!refused && refused.error().code == Errc::toolchain) GTEST_SKIP() << refused.error().describe();
  ASSERT_FALSE(refused);  // a bucket left out is a missing layer: refused unless allowed
  EXPECT_NE(refused.error().message.find("T=4096"), std::string::npos) << refused.error().describe();
  o.allow_missing = true;
  auto c = db::build_export(o);
  ASSERT_TRUE(c) << c.error().describe();
  std::set<int> exported;
  for (const json& b : c->manifest["problems"][0]["buckets"]) exported.insert(b["tokens"].get<int>());
  EXPECT_FALSE(exported.contains(4096));
  EXPECT_TRUE(exported.contains(1));
  // Every bucket left out (4096, and any bucket whose winner is the same pair) has its note.
  for (int t : {1, 16, 64, 512, 4096, 16384}) {
    if (exported.contains(t)) continue;
    bool noted = false;
    for (const std::string& n : c->summary.notes)
      noted |= n.find(fmt::format("T={}: not exported", t)) != std::string::npos && n.find("384") != std::string::npos;
    EXPECT_TRUE(noted) << "T=" << t;
  }
}

// A layer row whose stage parameters name another kernel than the row records
// beside them is an inconsistent database: refused, the role and both names
// said (export_bucket's check over every operation's role kernels).
TEST(Export, RefusesARowWhoseStageParametersNameAnotherKernel) {
  test::ScratchDir dir;
  const std::string db = h200_with(dir, "renamed.db", set_layer_4096("$.stage2_kernel", "'ft_other'"));
  auto refused = db::build_export({db, "", {}, {}});
  if (!refused && refused.error().code == Errc::toolchain) GTEST_SKIP() << refused.error().describe();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::database) << refused.error().describe();
  EXPECT_NE(refused.error().message.find("the stage2 parameters name ft_"), std::string::npos) << refused.error().describe();
  EXPECT_NE(refused.error().message.find("the row says ft_other"), std::string::npos) << refused.error().describe();
  EXPECT_NE(refused.error().context.find("T=4096"), std::string::npos) << refused.error().describe();
}

// A bucket the search left without a layer winner (stage winners only):
// export refuses the database naming it; with allow_missing the manifest
// lists it as missing_buckets and the summary names it; coverage reports it.
TEST(Export, RefusesABucketWithoutALayerUnlessAllowed) {
  test::ScratchDir dir;
  const std::string db = h200_with(dir, "no_16384.db", "DELETE FROM winners WHERE kind = 'layer' AND tokens = 16384;");
  db::ExportOptions o{db, "", {}, {}};
  auto refused = db::build_export(o);
  if (!refused && refused.error().code == Errc::toolchain) GTEST_SKIP() << refused.error().describe();
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::not_found);
  EXPECT_NE(refused.error().message.find("token buckets without a layer winner: moe_"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find(" T=16384;"), std::string::npos) << refused.error().message;
  EXPECT_NE(refused.error().message.find("--allow-missing"), std::string::npos) << refused.error().message;
  EXPECT_FALSE(db::export_winners({db, dir.file("out"), {}, {}}));
  EXPECT_FALSE(fs::exists(dir.file("out")));

  o.allow_missing = true;
  auto c = db::build_export(o);
  ASSERT_TRUE(c) << c.error().describe();
  const json& p = c->manifest["problems"][0];
  EXPECT_EQ(p["missing_buckets"], json::array({16384}));
  EXPECT_EQ(p["buckets"].size(), 5u);
  ASSERT_EQ(c->summary.missing.size(), 1u);
  EXPECT_EQ(c->summary.missing[0], p["key"].get<std::string>() + " T=16384");

  auto rep = db::check_coverage(db, {4096, 8192, 16384, 20000});
  ASSERT_TRUE(rep) << rep.error().describe();
  ASSERT_EQ(rep->lines.size(), 4u);
  struct Line {
    int tokens, bucket;
    std::string rule;
    std::optional<int> missing;
  };
  const std::vector<Line> want{{4096, 4096, "tuned", {}}, {8192, 4096, "missing layer", 16384},
                               {16384, 4096, "missing layer", 16384}, {20000, 4096, "largest bucket", {}}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].tokens);
    EXPECT_EQ(rep->lines[i].tokens, want[i].tokens);
    EXPECT_EQ(rep->lines[i].bucket, want[i].bucket);
    EXPECT_EQ(rep->lines[i].rule, want[i].rule);
    EXPECT_EQ(rep->lines[i].missing_bucket, want[i].missing);
  }
  ASSERT_EQ(rep->incomplete_buckets.size(), 1u);
  EXPECT_NE(rep->incomplete_buckets[0].find("T=16384 has stage winners but no layer winner"), std::string::npos);
}

TEST(Export, CorruptDatabaseIsRefused) {
  test::ScratchDir dir;
  test::write_bytes(dir.file("garbage.db"), "this is not a database at all, just text\n");
  auto r = db::export_winners({dir.file("garbage.db"), dir.file("out"), {}, {}});
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::database) << r.error().describe();
  EXPECT_FALSE(fs::exists(dir.file("out")));
  // A real database cut short: SQLite header intact, pages missing.
  const std::string whole = test::read_bytes(test::h200_db());
  test::write_bytes(dir.file("cut.db"), whole.substr(0, whole.size() / 3));
  auto cut = db::export_winners({dir.file("cut.db"), dir.file("out2"), {}, {}});
  ASSERT_FALSE(cut);
  EXPECT_EQ(cut.error().code, Errc::database) << cut.error().describe();
}

TEST(Export, UnknownTargetFilterFindsNothing) {
  auto r = db::build_export({test::h200_db(), "", std::string("gfx942"), {}});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no layer winners for target gfx942"), std::string::npos) << r.error().describe();
}

TEST(Export, CoverageOfPowersOfTwoUpTo16384) {
  auto tokens = parse_token_list("1..16384");
  ASSERT_TRUE(tokens);
  tokens->push_back(20000);
  auto rep = db::check_coverage(test::h200_db(), *tokens);
  ASSERT_TRUE(rep) << rep.error().describe();
  ASSERT_EQ(rep->lines.size(), tokens->size());
  std::map<int, std::pair<int, std::string>> by_t;
  for (const auto& l : rep->lines) {
    ASSERT_TRUE(l.bucket);
    by_t[l.tokens] = {*l.bucket, l.rule};
  }
  EXPECT_EQ(by_t[1], std::make_pair(1, std::string("tuned")));
  EXPECT_EQ(by_t[2], std::make_pair(16, std::string("next bucket up")));
  EXPECT_EQ(by_t[128], std::make_pair(512, std::string("next bucket up")));
  EXPECT_EQ(by_t[4096], std::make_pair(4096, std::string("tuned")));
  EXPECT_EQ(by_t[8192], std::make_pair(16384, std::string("next bucket up")));
  EXPECT_EQ(by_t[16384], std::make_pair(16384, std::string("tuned")));
  EXPECT_EQ(by_t[20000], std::make_pair(16384, std::string("largest bucket")));
  EXPECT_EQ(rep->untuned(), int(tokens->size()) - 6);
  EXPECT_TRUE(rep->incomplete_buckets.empty());
}

}  // namespace
}  // namespace ft
