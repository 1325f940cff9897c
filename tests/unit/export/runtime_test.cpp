// The runtime library without a GPU: every refusal (files outside the folder,
// hash mismatches, another target, bad manifests, steps that are not the
// layer program's) before anything loads, and the launch sequence of a plan
// recorded by a fake Device.
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "flytune_runtime.h"
#include "layer/program.hpp"
#include "generator/variant.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "tests/unit/export/export_test_support.hpp"
#include "tests/unit/export/fake_device.hpp"
#include "layer/device_structs.hpp"

namespace ft {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::FakeDevice;

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

Problem problem_of(const json& pj) {
  Problem p;
  p.experts = pj["experts"], p.hidden = pj["hidden"], p.inter = pj["inter"], p.topk = pj["topk"];
  return p;
}

// Changes a bucket's stage variants and writes its steps again as flytune
// export does (the layer program's steps, each launch with its code object).
void restage(json& bucket, const json& problem, const std::function<void(Variant&, Variant&)>& change) {
  Variant v1 = *Variant::from_json(bucket["stages"]["stage1"]), v2 = *Variant::from_json(bucket["stages"]["stage2"]);
  std::map<std::string, std::string> files;  // by role
  for (const json& st : bucket["steps"])
    if (st.contains("code_object")) files[st["role"]] = st["code_object"];
  change(v1, v2);
  bucket["stages"] = {{"stage1", v1.to_json()}, {"stage2", v2.to_json()}};
  auto prog = build_program(LayerRecipe{v1.target, problem_of(problem), {v1, v2}}, bucket["tokens"].get<int>());
  ASSERT_TRUE(prog) << prog.error().describe();
  json steps = steps_json(*prog);
  for (json& st : steps)
    if (st["op"] == "launch") st["code_object"] = files.count(st["role"]) ? files[st["role"]] : files["align"];
  bucket["steps"] = steps;
}

// A copy of the shared export that a test may tamper with.
class RuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const test::SharedExport& ex = test::shared_h200_export();
    if (!ex.skip_reason.empty()) GTEST_SKIP() << ex.skip_reason;
    ASSERT_TRUE(ex.error.empty()) << ex.error;
    dir_ = scratch_.file("copy");
    fs::copy(ex.dir, dir_);
    manifest_ = ex.manifest;
  }
  void write_manifest(const json& m) { test::write_bytes(dir_ + "/manifest.json", m.dump(1)); }
  std::string first_stage_file() const {
    return manifest_["problems"][0]["buckets"][0]["steps"][2]["code_object"].get<std::string>();
  }
  // Opens with a fake device; counts whether the device was ever asked for.
  Result<std::unique_ptr<rt::Runtime>> open(const std::string& arch = "sm_90a") {
    return rt::Runtime::open(dir_, [&]() -> Result<std::unique_ptr<Device>> {
      ++devices_opened_;
      auto d = std::make_unique<FakeDevice>(arch);
      fake_ = d.get();
      d->loads_out = &modules_loaded_;
      return std::unique_ptr<Device>(std::move(d));
    });
  }
  // The C API's answer (status and message) for this folder.
  std::pair<int, std::string> open_c() {
    char err[512] = {0};
    ft_runtime* rt = nullptr;
    const int st = ft_runtime_open(dir_.c_str(), &rt, err, sizeof err);
    if (rt) ft_runtime_close(rt);
    return {st, err};
  }

  test::ScratchDir scratch_;
  std::string dir_;
  json manifest_;
  int devices_opened_ = 0;
  FakeDevice* fake_ = nullptr;  // valid only while the runtime that owns it lives
  int modules_loaded_ = 0;
};

TEST_F(RuntimeTest, RefusesAFileOutsideTheFolder) {
  for (const std::string& name : {"../" + first_stage_file(), std::string("/etc/passwd"), std::string("..")}) {
    json m = manifest_;
    m["problems"][0]["buckets"][0]["steps"][2]["code_object"] = name;
    write_manifest(m);
    auto r = open();
    ASSERT_FALSE(r) << name;
    EXPECT_EQ(r.error().code, Errc::io);
    EXPECT_NE(r.error().message.find("outside its folder: '" + name + "'"), std::string::npos) << r.error().describe();
    EXPECT_EQ(devices_opened_, 0);
    auto [st, msg] = open_c();
    EXPECT_EQ(st, FT_ERR_FILE);
    EXPECT_NE(msg.find("outside its folder"), std::string::npos) << msg;
  }
}

TEST_F(RuntimeTest, RefusesASymlinkLeadingOutOfTheFolder) {
  const std::string outside = scratch_.file(first_stage_file());
  fs::copy_file(dir_ + "/" + first_stage_file(), outside);
  fs::remove(dir_ + "/" + first_stage_file());
  fs::create_symlink(outside, dir_ + "/" + first_stage_file());
  auto r = open();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::io) << r.error().describe();
  EXPECT_EQ(devices_opened_, 0);
}

TEST_F(RuntimeTest, RefusesACodeObjectThatDoesNotMatchItsHash) {
  const std::string path = dir_ + "/" + first_stage_file();
  std::string bytes = test::read_bytes(path);
  bytes[bytes.size() / 2] ^= 0x01;
  test::write_bytes(path, bytes);
  auto r = open();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::verify);
  EXPECT_NE(r.error().message.find("does not match its recorded hash"), std::string::npos) << r.error().describe();
  EXPECT_EQ(devices_opened_, 0);
  EXPECT_EQ(open_c().first, FT_ERR_HASH);
}

TEST_F(RuntimeTest, RefusesAMissingCodeObject) {
  fs::remove(dir_ + "/" + first_stage_file());
  auto r = open();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::io);
  EXPECT_NE(r.error().message.find("missing"), std::string::npos) << r.error().describe();
  EXPECT_EQ(open_c().first, FT_ERR_FILE);
}

TEST_F(RuntimeTest, RefusesAnotherTarget) {
  auto r = open("gfx942");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::no_device);
  EXPECT_NE(r.error().message.find("the export is for sm_90a"), std::string::npos) << r.error().describe();
  EXPECT_NE(r.error().message.find("is gfx942"), std::string::npos);
  EXPECT_EQ(modules_loaded_, 0);  // refused before loading anything
}

TEST_F(RuntimeTest, RefusesBadManifests) {
  json newer = manifest_;
  newer["schema_version"] = 5;
  write_manifest(newer);
  auto r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("schema_version 5, this runtime reads 4"), std::string::npos) << r.error().describe();
  EXPECT_EQ(open_c().first, FT_ERR_MANIFEST);

  test::write_bytes(dir_ + "/manifest.json", "{ not json");
  r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not a JSON object"), std::string::npos);

  json missing = manifest_;
  missing["problems"][0].erase("hidden");
  write_manifest(missing);
  r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("malformed"), std::string::npos) << r.error().describe();

  json negative = manifest_;
  negative["problems"][0]["experts"] = -8;
  write_manifest(negative);
  r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("experts -8 must be a positive integer"), std::string::npos) << r.error().describe();

  fs::remove(dir_ + "/manifest.json");
  r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("manifest.json is missing"), std::string::npos) << r.error().describe();
  EXPECT_EQ(devices_opened_, 0);
}

// A manifest's recorded steps must be what the layer program computes for its
// stage variants: a grid edited by hand, or computed by an older rule (a
// persistent stage given the one-tile-per-block grid), is refused at open.
TEST_F(RuntimeTest, RefusesStepsThatAreNotTheLayerProgramsOwn) {
  json grid = manifest_;
  grid["problems"][0]["buckets"][2]["steps"][3]["grid"][0] = 1;
  write_manifest(grid);
  auto r = open();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::invalid_input);
  EXPECT_NE(r.error().message.find("differ from this runtime's layer program"), std::string::npos) << r.error().describe();
  EXPECT_NE(r.error().message.find("/3/grid/0"), std::string::npos) << r.error().describe();
  EXPECT_EQ(devices_opened_, 0);
  EXPECT_EQ(open_c().first, FT_ERR_MANIFEST);

  // Stage 2 made persistent (8 tiles per block); its recorded grid left as the
  // old rule computed it: (rows / tile_m, hidden / tile_n, split_k).
  json persistent = manifest_;
  json& bucket = persistent["problems"][0]["buckets"][4];
  const json old_grid = bucket["steps"][3]["grid"];
  restage(bucket, persistent["problems"][0], [](Variant&, Variant& v2) { v2.set("tiles_per_block", 8); });
  EXPECT_NE(bucket["steps"][3]["grid"], old_grid);
  EXPECT_EQ(bucket["steps"][3]["grid"][1], 1);
  write_manifest(persistent);
  ASSERT_TRUE(open()) << "the program's own steps load";
  bucket["steps"][3]["grid"] = old_grid;
  write_manifest(persistent);
  r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("differ from this runtime's layer program"), std::string::npos) << r.error().describe();
}

// Files that are not regular files, or far too large, are refused with an
// error, never read (a manifest that is /dev/zero would never end).
TEST_F(RuntimeTest, RefusesFoldersDevicesAndHugeFilesWhereFilesShouldBe) {
  const std::string manifest = dir_ + "/manifest.json";
  fs::remove(manifest);
  fs::create_directory(manifest);
  auto r = open();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::io);
  EXPECT_NE(r.error().message.find("not a regular file"), std::string::npos) << r.error().describe();
  EXPECT_EQ(open_c().first, FT_ERR_FILE);
  fs::remove(manifest);
  fs::create_symlink("/dev/zero", manifest);
  r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("not a regular file"), std::string::npos) << r.error().describe();
  fs::remove(manifest);
  {
    std::ofstream big(manifest, std::ios::binary);
    big.seekp(std::streamoff(rt::kMaxManifestBytes) + 1);
    big.put('\n');  // sparse: no real disk use
  }
  r = open();
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("more than the"), std::string::npos) << r.error().describe();
  write_manifest(manifest_);
  ASSERT_TRUE(open());
  const std::string object = dir_ + "/" + first_stage_file();
  fs::remove(object);
  fs::create_directory(object);
  r = open();
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::io);
  EXPECT_NE(r.error().message.find("not a regular file"), std::string::npos) << r.error().describe();
  EXPECT_EQ(devices_opened_, 1);  // only the good open reached the device
}

TEST_F(RuntimeTest, SelectsNextBucketUpElseLargest) {
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  const std::string key = manifest_["problems"][0]["key"];
  for (auto [t, bucket] : std::vector<std::pair<int, int>>{{1, 1}, {5, 16}, {64, 64}, {700, 4096}, {4096, 4096}, {20000, 16384}}) {
    auto plan = (*r)->select(key, t);
    ASSERT_TRUE(plan) << plan.error().describe();
    EXPECT_EQ(plan->bucket->tokens, bucket) << "T=" << t;
  }
  auto unknown = (*r)->select("moe_e1_h1_i1_k1_bf16_swiglu_uniform", 4);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().code, Errc::not_found);
  EXPECT_FALSE((*r)->select(key, 0));
}

// The launch path: memset + four launches on the caller's stream, no host
// synchronisation, grids exactly as the layer program computes them.
TEST_F(RuntimeTest, LaunchRunsTheLayerProgramWithoutSynchronising) {
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  const json& pj = manifest_["problems"][0];
  const Problem p = problem_of(pj);
  for (int t : {1, 5, 64, 700, 4096, 20000}) {
    auto plan = (*r)->select(pj["key"].get<std::string>(), t);
    ASSERT_TRUE(plan);
    rt::LayerBuffers b{1, 2, 3, 4, 5, 0, 0, 6, 7, 8, 9, 10, 11};
    fake_->launches.clear();
    fake_->events.clear();
    int dummy_stream = 0;
    ASSERT_TRUE((*r)->launch(*plan, b, StreamHandle{&dummy_stream}));
    // The wide align adds a launch above kWideAlignPairs pairs.
    const std::size_t launches = (long long)t * p.topk > kWideAlignPairs ? 5u : 4u;
    ASSERT_EQ(fake_->launches.size(), launches);
    ASSERT_EQ(fake_->events.size(), launches + 1);
    EXPECT_EQ(fake_->events[0], "memset 7 0 x" + std::to_string(std::size_t(t) * p.hidden) + " stream");
    for (const std::string& e : fake_->events) EXPECT_NE(e, "synchronize");
    for (const std::string& e : fake_->events) EXPECT_TRUE(e.ends_with(" stream")) << e;
    const json* bucket = nullptr;
    for (const json& bj : pj["buckets"])
      if (bj["tokens"] == plan->bucket->tokens) bucket = &bj;
    ASSERT_NE(bucket, nullptr);
    const Variant v1 = *Variant::from_json((*bucket)["stages"]["stage1"]);
    const Variant v2 = *Variant::from_json((*bucket)["stages"]["stage2"]);
    auto prog = build_program(LayerRecipe{v1.target, p, {v1, v2}}, t);
    ASSERT_TRUE(prog) << prog.error().describe();
    for (std::size_t i = 0; i < launches; ++i) {
      const FakeDevice::Launch& l = fake_->launches[i];
      const Step& s = prog->steps[i + 1];
      EXPECT_EQ(l.symbol, s.symbol) << "T=" << t;
      EXPECT_EQ(l.grid.x, unsigned(s.shape.grid_x)) << s.name << " T=" << t;
      EXPECT_EQ(l.grid.y, unsigned(s.shape.grid_y)) << s.name;
      EXPECT_EQ(l.grid.z, unsigned(s.shape.grid_z)) << s.name;
      EXPECT_EQ(l.block.x, unsigned(s.shape.block)) << s.name;
      EXPECT_EQ(l.shared, s.shape.lds_bytes) << s.name;
    }
    const std::size_t s1 = launches - 3;  // after the align launch(es)
    EXPECT_EQ(fake_->launches[s1].symbol, v1.name());
    EXPECT_EQ(fake_->launches[s1 + 1].symbol, v2.name());
    const MoeArgs& a = fake_->launches[s1].args;
    EXPECT_EQ(a.tokens, t);
    EXPECT_EQ(a.align_block, prog->align_block);
    EXPECT_EQ(a.max_padded_rows, max_padded_rows(p, t, prog->align_block));
    EXPECT_EQ(addr(a.w1), 4u);
    EXPECT_EQ(addr(a.y), 11u);
    EXPECT_EQ(a.bad_ids, nullptr);
    const rt::WorkspaceSizes w = (*r)->workspace(*plan);
    EXPECT_EQ(w.sorted_ids, prog->bytes[std::size_t(Buf::sorted_ids)]);
    EXPECT_GE(w.sorted_ids, std::size_t(max_padded_rows(p, t, prog->align_block)) * 4);
    EXPECT_EQ(w.y_acc, std::size_t(t) * p.hidden * 4);
  }
  // A null buffer is refused before anything is enqueued.
  auto plan = (*r)->select(pj["key"].get<std::string>(), 5);
  fake_->events.clear();
  rt::LayerBuffers missing{1, 2, 3, 4, 5, 0, 0, 6, 7, 8, 9, 10, 0};
  EXPECT_FALSE((*r)->launch(*plan, missing, {}));
  EXPECT_TRUE(fake_->events.empty());
}

// A stage that reads pre-shuffled weights gets the shuffled pointer, and a
// launch without it is refused before anything is enqueued.
TEST_F(RuntimeTest, ShuffledStageReadsTheShuffledWeights) {
  json m = manifest_;
  for (json& b : m["problems"][0]["buckets"])
    restage(b, m["problems"][0], [](Variant& v1, Variant&) { v1.set("layout", int(WeightLayout::shuffled)); });
  write_manifest(m);
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  auto plan = (*r)->select(m["problems"][0]["key"].get<std::string>(), 64);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->bucket->recipe.stage(StageRole::stage1)->contract().weights, WeightLayout::shuffled);
  EXPECT_EQ(plan->bucket->recipe.stage(StageRole::stage2)->contract().weights, WeightLayout::plain);
  rt::LayerBuffers b{1, 2, 3, 4, 5, 0, 0, 6, 7, 8, 9, 10, 11};
  auto refused = (*r)->launch(*plan, b, {});
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("w1_shuffled (a stage reads pre-shuffled weights"), std::string::npos)
      << refused.error().describe();
  EXPECT_TRUE(fake_->launches.empty());
  b.w1_shuffled = 40;
  ASSERT_TRUE((*r)->launch(*plan, b, {}));
  ASSERT_EQ(fake_->launches.size(), 4u);
  EXPECT_EQ(addr(fake_->launches[1].args.w1), 40u);  // stage 1: shuffled
  EXPECT_EQ(addr(fake_->launches[2].args.w2), 5u);   // stage 2: plain
  // The shuffle kernel itself: rows a multiple of 16, cols of 8.
  EXPECT_FALSE((*r)->arrange_weights(0x10000, 0x20000, 15, 8, WeightLayout::shuffled, {}));
  ASSERT_TRUE((*r)->arrange_weights(0x10000, 0x20000, 32, 16, WeightLayout::shuffled, {}));
  EXPECT_EQ(fake_->launches.back().symbol, "ft_sm_90a_shuffle");
  EXPECT_EQ(fake_->launches.back().grid.x, 1u);  // 32*16/8 = 64 chunks, 256 threads
}

// The shuffle kernel's argument as launched (ft::ShuffleArgs, 32 bytes).
ShuffleArgs shuffle_args_of(const FakeDevice::Launch& l) {
  ShuffleArgs a{};
  EXPECT_EQ(l.raw_args.size(), sizeof a);
  if (l.raw_args.size() == sizeof a) std::memcpy(&a, l.raw_args.data(), sizeof a);
  return a;
}

// Stage 1 shuffled, stage 2 tiled: the manifest of a Hopper winner whose
// stage 2 has a producer warpgroup.
json mixed_layouts(json m) {
  for (json& b : m["problems"][0]["buckets"])
    restage(b, m["problems"][0], [](Variant& v1, Variant& v2) {
      v1.set("layout", int(WeightLayout::shuffled));
      v2.set("layout", int(WeightLayout::tiled));
    });
  return m;
}

// Each stage gets the copy its layout asks for; a launch without a needed copy
// is refused, naming every missing copy and how to make it, before anything
// is enqueued.
TEST_F(RuntimeTest, TiledStageReadsTheTiledWeights) {
  const json m = mixed_layouts(manifest_);
  write_manifest(m);
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  auto plan = (*r)->select(m["problems"][0]["key"].get<std::string>(), 64);
  ASSERT_TRUE(plan);
  EXPECT_EQ(plan->bucket->recipe.stage(StageRole::stage1)->contract().weights, WeightLayout::shuffled);
  EXPECT_EQ(plan->bucket->recipe.stage(StageRole::stage2)->contract().weights, WeightLayout::tiled);
  rt::LayerBuffers b{1, 2, 3, 4, 5, 0, 0, 6, 7, 8, 9, 10, 11};
  auto both = (*r)->launch(*plan, b, {});
  ASSERT_FALSE(both);
  EXPECT_EQ(both.error().code, Errc::usage);
  EXPECT_NE(both.error().message.find("w1_shuffled ("), std::string::npos) << both.error().describe();
  EXPECT_NE(both.error().message.find("w2_tiled ("), std::string::npos) << both.error().describe();
  b.w1_shuffled = 40;
  b.w2_tiled = 41;  // the wrong copies for these stages: plain w2 and tiled w1 are not looked at
  b.w2 = 0;
  b.w1_tiled = 0;
  auto one = (*r)->launch(*plan, b, {});
  ASSERT_TRUE(one) << one.error().describe();
  b.w2_tiled = 0;
  auto tiled_missing = (*r)->launch(*plan, b, {});
  ASSERT_FALSE(tiled_missing);
  EXPECT_EQ(tiled_missing.error().message,
            "null layer buffers: w2_tiled (a stage reads tiled weights: arrange them once with the tiled layout)");
  ASSERT_EQ(fake_->launches.size(), 4u);  // only the successful launch enqueued anything
  EXPECT_EQ(addr(fake_->launches[1].args.w1), 40u);
  EXPECT_EQ(addr(fake_->launches[2].args.w2), 41u);
  // Other null buffers are named too.
  b.w2_tiled = 41;
  b.y = 0;
  b.topk_ids = 0;
  auto others = (*r)->launch(*plan, b, {});
  ASSERT_FALSE(others);
  EXPECT_EQ(others.error().message, "null layer buffers: topk_ids, y");
}

// ft_arrange_weights and ft_shuffle_weights launch the support unit's shuffle
// kernel with the layout in ft::ShuffleArgs; sizes are checked per layout.
TEST_F(RuntimeTest, ArrangeWeightsPassesTheLayoutToTheShuffleKernel) {
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  const DevicePtr src = 0x100000, dst = 0x200000;
  ASSERT_TRUE((*r)->arrange_weights(src, dst, 32, 128, WeightLayout::tiled, {}));
  ASSERT_EQ(fake_->launches.size(), 1u);
  EXPECT_EQ(fake_->launches[0].symbol, "ft_sm_90a_shuffle");
  EXPECT_EQ(fake_->launches[0].grid.x, 2u);  // 32*128/8 = 512 chunks, 256 threads
  EXPECT_EQ(fake_->launches[0].block.x, 256u);
  ShuffleArgs a = shuffle_args_of(fake_->launches[0]);
  EXPECT_EQ(addr(a.src), src);
  EXPECT_EQ(addr(a.dst), dst);
  EXPECT_EQ(a.rows, 32);
  EXPECT_EQ(a.cols, 128);
  EXPECT_EQ(a.layout, 2);
  EXPECT_EQ(a.reserved, 0);
  ASSERT_TRUE((*r)->arrange_weights(src, dst, 32, 16, WeightLayout::shuffled, {}));
  EXPECT_EQ(shuffle_args_of(fake_->launches.back()).layout, 1);
  ASSERT_TRUE((*r)->arrange_weights(src, dst, 32, 24, WeightLayout::shuffled, {}));
  EXPECT_EQ(shuffle_args_of(fake_->launches.back()).layout, 1);
  const std::size_t launched = fake_->launches.size();

  // tiled: rows a multiple of 16, cols of 64.
  auto cols = (*r)->arrange_weights(src, dst, 32, 96, WeightLayout::tiled, {});
  ASSERT_FALSE(cols);
  EXPECT_EQ(cols.error().code, Errc::usage);
  EXPECT_EQ(cols.error().message, "tiled weights: rows must be a multiple of 16 and cols of 64 (got 32 x 96)");
  EXPECT_FALSE((*r)->arrange_weights(src, dst, 24, 128, WeightLayout::tiled, {}));
  EXPECT_FALSE((*r)->arrange_weights(src, dst, 32, 32, WeightLayout::tiled, {}));
  EXPECT_FALSE((*r)->arrange_weights(src, dst, 32, 20, WeightLayout::shuffled, {}));
  auto plain = (*r)->arrange_weights(src, dst, 32, 128, WeightLayout::plain, {});
  ASSERT_FALSE(plain);
  EXPECT_NE(plain.error().message.find("shuffled (1) or tiled (2)"), std::string::npos) << plain.error().describe();
  EXPECT_FALSE((*r)->arrange_weights(0, dst, 32, 128, WeightLayout::tiled, {}));
  auto overlap = (*r)->arrange_weights(src, src + 32 * 128 * 2 - 2, 32, 128, WeightLayout::tiled, {});
  ASSERT_FALSE(overlap);
  EXPECT_NE(overlap.error().message.find("overlap"), std::string::npos) << overlap.error().describe();
  EXPECT_TRUE((*r)->arrange_weights(src, src + 32 * 128 * 2, 32, 128, WeightLayout::tiled, {}));  // adjacent is fine
  EXPECT_EQ(fake_->launches.size(), launched + 1);

  // fp8 codes: the 16-bit matrix of their byte pairs (cols / 2), so 8-bit columns come in 16s and 128s.
  ASSERT_TRUE((*r)->arrange_weights(src, dst, 32, 256, WeightLayout::tiled, {}, 1));
  a = shuffle_args_of(fake_->launches.back());
  EXPECT_EQ(a.rows, 32);
  EXPECT_EQ(a.cols, 128);
  EXPECT_EQ(fake_->launches.back().grid.x, 2u);
  ASSERT_TRUE((*r)->arrange_weights(src, dst, 32, 16, WeightLayout::shuffled, {}, 1));
  EXPECT_EQ(shuffle_args_of(fake_->launches.back()).cols, 8);
  auto codes = (*r)->arrange_weights(src, dst, 32, 64, WeightLayout::tiled, {}, 1);
  ASSERT_FALSE(codes);
  EXPECT_EQ(codes.error().message, "tiled weights: rows must be a multiple of 16 and cols of 128 (got 32 x 64)");
  EXPECT_FALSE((*r)->arrange_weights(src, dst, 32, 24, WeightLayout::shuffled, {}, 1));
  EXPECT_FALSE((*r)->arrange_weights(src, dst, 32, 128, WeightLayout::tiled, {}, 4));
  EXPECT_TRUE((*r)->arrange_weights(src, src + 32 * 256, 32, 256, WeightLayout::tiled, {}, 1));  // adjacent at one byte per code
}

// The C API over the same runtime: the layout queries, the appended tiled
// buffers reaching the kernels, the arrange call and its argument checks.
TEST_F(RuntimeTest, CApiReportsLayoutsAndTakesTiledBuffers) {
  const json m = mixed_layouts(manifest_);
  write_manifest(m);
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  FakeDevice* fake = fake_;
  ft_runtime* rt = rt::adopt_runtime(std::move(*r));
  ASSERT_NE(rt, nullptr);
  ft_plan* plan = nullptr;
  ASSERT_EQ(ft_runtime_select(rt, m["problems"][0]["key"].get<std::string>().c_str(), 64, &plan), FT_OK);
  EXPECT_EQ(ft_plan_needs_shuffled(plan, 1), 1);
  EXPECT_EQ(ft_plan_needs_shuffled(plan, 2), 0);
  EXPECT_EQ(ft_plan_needs_tiled(plan, 1), 0);
  EXPECT_EQ(ft_plan_needs_tiled(plan, 2), 1);
  EXPECT_EQ(ft_plan_needs_tiled(plan, 0), 0);
  EXPECT_EQ(ft_plan_needs_tiled(plan, 3), 0);
  EXPECT_EQ(ft_plan_needs_tiled(nullptr, 2), 0);

  auto p = [](std::uintptr_t v) { return reinterpret_cast<void*>(v); };
  ft_layer_buffers b{};
  b.x = p(1), b.topk_ids = static_cast<const std::int32_t*>(p(2)), b.topk_weights = static_cast<const float*>(p(3));
  b.w1 = p(4), b.w2 = p(5), b.w1_shuffled = p(40);
  b.inter = p(6), b.y_acc = static_cast<float*>(p(7)), b.sorted_ids = static_cast<std::int32_t*>(p(8));
  b.block_experts = static_cast<std::int32_t*>(p(9)), b.padded_rows = static_cast<std::int32_t*>(p(10)), b.y = p(11);
  EXPECT_EQ(ft_plan_launch(plan, &b, nullptr), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("w2_tiled ("), std::string::npos) << ft_runtime_last_error(rt);
  EXPECT_TRUE(fake->launches.empty());
  b.w2_tiled = p(51);
  b.w1_tiled = p(50);  // not read: stage 1 is shuffled
  ASSERT_EQ(ft_plan_launch(plan, &b, nullptr), FT_OK) << ft_runtime_last_error(rt);
  ASSERT_EQ(fake->launches.size(), 4u);
  EXPECT_EQ(addr(fake->launches[1].args.w1), 40u);
  EXPECT_EQ(addr(fake->launches[2].args.w2), 51u);

  void* src = p(0x100000);
  void* dst = p(0x200000);
  ASSERT_EQ(ft_runtime_arrange_weights(rt, src, dst, 64, 256, FT_WEIGHT_LAYOUT_TILED, nullptr), FT_OK);
  EXPECT_EQ(shuffle_args_of(fake->launches.back()).layout, 2);
  EXPECT_EQ(shuffle_args_of(fake->launches.back()).rows, 64);
  ASSERT_EQ(ft_runtime_arrange_weights(rt, src, dst, 64, 256, FT_WEIGHT_LAYOUT_SHUFFLED, nullptr), FT_OK);
  EXPECT_EQ(shuffle_args_of(fake->launches.back()).layout, 1);
  ASSERT_EQ(ft_runtime_shuffle_weights(rt, src, dst, 64, 8, nullptr), FT_OK);
  EXPECT_EQ(shuffle_args_of(fake->launches.back()).layout, 1);
  const std::size_t launched = fake->launches.size();
  for (int bad : {int(FT_WEIGHT_LAYOUT_PLAIN), 3, -1}) {
    EXPECT_EQ(ft_runtime_arrange_weights(rt, src, dst, 64, 256, bad, nullptr), FT_ERR_ARGUMENT) << bad;
    EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("FT_WEIGHT_LAYOUT_TILED (2)"), std::string::npos)
        << ft_runtime_last_error(rt);
  }
  EXPECT_EQ(ft_runtime_arrange_weights(rt, src, dst, 64, 200, FT_WEIGHT_LAYOUT_TILED, nullptr), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("cols of 64"), std::string::npos) << ft_runtime_last_error(rt);
  EXPECT_EQ(ft_runtime_arrange_weights(nullptr, src, dst, 64, 256, FT_WEIGHT_LAYOUT_TILED, nullptr), FT_ERR_ARGUMENT);
  EXPECT_EQ(fake->launches.size(), launched);
  ft_plan_free(plan);
  ft_runtime_close(rt);
}

// ft_layer_buffers only grows at its end: the fields of earlier releases keep
// their offsets, the tiled copies follow y, then bad_ids, then the one workspace.
TEST(RuntimeC, LayerBuffersAppendTheTiledCopies) {
  constexpr std::size_t p = sizeof(void*);
  EXPECT_EQ(offsetof(ft_layer_buffers, w1), 3 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, w1_shuffled), 5 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, inter), 7 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, y), 12 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, w1_tiled), 13 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, w2_tiled), 14 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, bad_ids), 15 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, workspace), 16 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, workspace_bytes), 17 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, x_scale), 18 * p);  // fp8 layers' scales, appended
  EXPECT_EQ(offsetof(ft_layer_buffers, w1_scales), 19 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, w2_scales), 20 * p);
  EXPECT_EQ(offsetof(ft_layer_buffers, inter_scale), 21 * p);  // ABI 1.1: the static mode's intermediate scale
  EXPECT_EQ(sizeof(ft_layer_buffers), 22 * p);
  EXPECT_EQ(FT_SCALES_PER_TENSOR, 1);
  EXPECT_EQ(FT_SCALES_BLOCK128, 3);
  EXPECT_EQ(FT_SCALES_STATIC, 4);
  EXPECT_EQ(FT_WEIGHT_LAYOUT_SHUFFLED, 1);
  EXPECT_EQ(FT_WEIGHT_LAYOUT_TILED, 2);
}

// The OCP -> fnuz checkpoint conversion of the C API (host memory): codes kept
// but -0 and the NaNs, every scale doubled; refused whole when a doubled scale
// would not be finite.
TEST(RuntimeC, ConvertsOcpFp8CheckpointsToFnuzInPlace) {
  std::vector<std::uint8_t> codes{0x00, 0x38, 0x7e, 0x80, 0x7f, 0xff, 0xb8};
  std::vector<float> scales{0.5f, 3.0f};
  std::size_t nans = 9;
  ASSERT_EQ(ft_fp8_ocp_to_fnuz(codes.data(), codes.size(), scales.data(), scales.size(), &nans), FT_OK)
      << ft_runtime_last_error(nullptr);
  EXPECT_EQ(codes, (std::vector<std::uint8_t>{0x00, 0x38, 0x7e, 0x00, 0x80, 0x80, 0xb8}));
  EXPECT_EQ(scales, (std::vector<float>{1.0f, 6.0f}));
  EXPECT_EQ(nans, 2u);
  std::vector<float> huge{3e38f};
  std::vector<std::uint8_t> kept{0x80};
  EXPECT_EQ(ft_fp8_ocp_to_fnuz(kept.data(), kept.size(), huge.data(), huge.size(), nullptr), FT_ERR_ARGUMENT);
  EXPECT_EQ(kept[0], 0x80);  // nothing changed
  EXPECT_EQ(huge[0], 3e38f);
  EXPECT_EQ(ft_fp8_ocp_to_fnuz(nullptr, 4, huge.data(), 1, nullptr), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_runtime_last_error(nullptr)).find("must not be null"), std::string::npos);
}

// Every failing call leaves its message: on the runtime, or (no handle) in
// the thread's last error.
TEST(RuntimeC, NullArgumentsAndMissingFolder) {
  char err[256] = {0};
  ft_runtime* rt = nullptr;
  EXPECT_EQ(ft_runtime_open(nullptr, &rt, err, sizeof err), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(err).find("must not be null"), std::string::npos) << err;
  EXPECT_NE(std::string(ft_runtime_last_error(nullptr)).find("must not be null"), std::string::npos);
  EXPECT_EQ(ft_runtime_open("/nonexistent/flytune-export", &rt, err, sizeof err), FT_ERR_FILE);
  EXPECT_EQ(rt, nullptr);
  EXPECT_NE(std::string(err).find("manifest.json is missing"), std::string::npos) << err;
  EXPECT_EQ(std::string(ft_runtime_last_error(nullptr)), err);
  ft_plan* plan = nullptr;
  EXPECT_EQ(ft_runtime_select(nullptr, "k", 1, &plan), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_runtime_last_error(nullptr)).find("ft_runtime_select"), std::string::npos);
  EXPECT_EQ(ft_plan_launch(nullptr, nullptr, nullptr), FT_ERR_ARGUMENT);
  EXPECT_NE(std::string(ft_runtime_last_error(nullptr)).find("ft_plan_launch"), std::string::npos);
  EXPECT_EQ(ft_plan_launch_checked(nullptr, nullptr, nullptr, nullptr), FT_ERR_ARGUMENT);
  EXPECT_EQ(ft_runtime_alloc(nullptr, 4, nullptr), FT_ERR_ARGUMENT);
  EXPECT_EQ(ft_runtime_free(nullptr, nullptr), FT_ERR_ARGUMENT);
  EXPECT_EQ(ft_runtime_bucket_count(nullptr, 0), 0);
  EXPECT_EQ(ft_runtime_bucket_tokens(nullptr, 0, 0), 0);
}

// An export written with --allow-missing: bucket 16384 has no layer
// (missing_buckets). The runtime serves T near it with the 4096 bucket's
// kernels and says so through the plan's coverage, as it does for a T above
// every bucket; other T are tuned. Malformed missing_buckets are refused.
TEST_F(RuntimeTest, CoverageSaysWhenAnotherBucketServesT) {
  json m = manifest_;
  json& p = m["problems"][0];
  ASSERT_EQ(p["buckets"].back()["tokens"], 16384);
  p["buckets"].erase(p["buckets"].size() - 1);
  p["missing_buckets"] = json::array({16384});
  write_manifest(m);
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  ft_runtime* rt = rt::adopt_runtime(std::move(*r));
  const std::string key = p["key"];
  struct Case {
    int tokens, bucket, coverage;
    const char* note;
  };
  for (const Case& c : {Case{1, 1, FT_COVERAGE_TUNED, ""}, Case{700, 4096, FT_COVERAGE_TUNED, ""},
                        Case{4096, 4096, FT_COVERAGE_TUNED, ""},
                        Case{4097, 4096, FT_COVERAGE_MISSING_BUCKET,
                             "T=4097 is served by the T=4096 bucket's kernels: bucket T=16384 has no layer in this export"},
                        Case{16384, 4096, FT_COVERAGE_MISSING_BUCKET, "T=16384 is served by the T=4096 bucket's kernels"},
                        Case{20000, 4096, FT_COVERAGE_ABOVE_LARGEST,
                             "T=20000 is above the largest tuned bucket, T=4096; served by its kernels (bucket T=16384 has "
                             "no layer in this export)"}}) {
    SCOPED_TRACE(c.tokens);
    ft_plan* plan = nullptr;
    ASSERT_EQ(ft_runtime_select(rt, key.c_str(), c.tokens, &plan), FT_OK) << ft_runtime_last_error(rt);
    EXPECT_EQ(ft_plan_bucket(plan), c.bucket);
    EXPECT_EQ(ft_plan_coverage(plan), c.coverage);
    const std::string note = ft_plan_coverage_note(plan);
    if (c.coverage == FT_COVERAGE_TUNED) {
      EXPECT_EQ(note, "");
    } else {
      EXPECT_NE(note.find(c.note), std::string::npos) << note;
    }
    ft_plan_free(plan);
  }
  ft_runtime_close(rt);
  EXPECT_EQ(ft_plan_coverage(nullptr), -1);
  EXPECT_STREQ(ft_plan_coverage_note(nullptr), "");
  for (const json& bad : {json::array({0}), json::array({4096}), json::array({"x"}), json("16384")}) {
    SCOPED_TRACE(bad.dump());
    p["missing_buckets"] = bad;
    write_manifest(m);
    EXPECT_FALSE(open());
  }
  // Without missing buckets (older exports), only a T above the largest is not tuned.
  p.erase("missing_buckets");
  write_manifest(m);
  auto plain = open();
  ASSERT_TRUE(plain) << plain.error().describe();
  auto below = (*plain)->select(key, 16384);
  ASSERT_TRUE(below);
  EXPECT_EQ(below->coverage.coverage, rt::Coverage::above_largest);
  auto tuned = (*plain)->select(key, 4000);
  ASSERT_TRUE(tuned);
  EXPECT_EQ(tuned->coverage.coverage, rt::Coverage::tuned);
}

TEST_F(RuntimeTest, CApiListsBucketsOfEachProblem) {
  auto r = open();
  ASSERT_TRUE(r) << r.error().describe();
  ft_runtime* rt = rt::adopt_runtime(std::move(*r));
  ASSERT_EQ(ft_runtime_problem_count(rt), 1);
  ASSERT_EQ(ft_runtime_bucket_count(rt, 0), 6);
  std::vector<int> buckets;
  for (int i = 0; i < 6; ++i) buckets.push_back(ft_runtime_bucket_tokens(rt, 0, i));
  EXPECT_EQ(buckets, (std::vector<int>{1, 16, 64, 512, 4096, 16384}));
  EXPECT_EQ(ft_runtime_bucket_count(rt, 1), 0);
  EXPECT_EQ(ft_runtime_bucket_tokens(rt, 0, 6), 0);
  ft_runtime_close(rt);
}

}  // namespace
}  // namespace ft
