// The one layer program: the steps, grids, argument scalars and buffer sizes
// of a layer, and the recipes it refuses. Every launcher (search, export,
// runtime, the emulator tests) runs these steps, so the rules are pinned here.
#include <algorithm>
#include <cctype>
#include <functional>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "generator/atoms.hpp"
#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "layer/program.hpp"

namespace ft {
namespace {

Problem mixtral() { return *problem_from_preset("mixtral-8x7b"); }

Variant wgmma(StageRole kind, int tile_m, int tile_n, int warps_m) {
  Variant v = Variant::of(*find_target("sm_90a"), kind, *find_atom("wgmma_m64k16_f32_bf16"));
  v.set("tile_m", tile_m);
  v.set("tile_n", tile_n);
  v.set("tile_k", 64);
  v.set("warps_m", warps_m);
  v.set("warps_n", 1);
  v.set("stages", 4);
  return v;
}

LayerRecipe recipe(Variant s1, Variant s2, Problem p = mixtral()) { return {s1.target, p, {s1, s2}}; }

std::vector<std::string> step_names(const LayerProgram& p) {
  std::vector<std::string> out;
  for (const Step& s : p.steps) out.push_back(s.name);
  return out;
}

TEST(LayerProgram, AtomicLayerClearsThenAlignsThenRunsBothStagesAndReduces) {
  const Problem p = mixtral();
  const LayerRecipe r = recipe(wgmma(StageRole::stage1, 128, 128, 8), wgmma(StageRole::stage2, 128, 256, 8));
  auto prog = build_program(r, 333);
  ASSERT_TRUE(prog) << prog.error().describe();
  EXPECT_EQ(step_names(*prog), (std::vector<std::string>{"clear_y_acc", "align", "stage1", "stage2", "reduce"}));
  const Step& clear = prog->steps[0];
  EXPECT_EQ(clear.op, Step::Op::memset_u32);
  EXPECT_EQ(clear.buffer, Buf::y_acc);
  EXPECT_EQ(clear.count, 333u * 4096u);
  EXPECT_EQ(prog->align_block, 128);
  EXPECT_EQ(prog->max_padded_rows, max_padded_rows(p, 333, 128));
  const Step& s1 = *prog->find("stage1");
  EXPECT_EQ(s1.symbol, r.stage(StageRole::stage1)->name());
  EXPECT_EQ(s1.shape.grid_x, prog->max_padded_rows / 128);
  EXPECT_EQ(s1.shape.grid_y, 14336 / 128);
  EXPECT_EQ(s1.shape.block, r.stage(StageRole::stage1)->threads());
  EXPECT_EQ(s1.shape.lds_bytes, r.stage(StageRole::stage1)->lds_bytes());
  EXPECT_EQ(s1.args.tokens, 333);
  EXPECT_EQ(s1.args.align_block, 128);
  EXPECT_EQ(s1.args.max_padded_rows, prog->max_padded_rows);
  EXPECT_EQ(s1.args.flags, 0);
  EXPECT_EQ(s1.args.x, nullptr);  // pointers come from the buffer table at execution
  const Step& red = *prog->find("reduce");
  EXPECT_EQ(red.role, Role::reduce_atomic);
  EXPECT_EQ(red.symbol, reduce_entry(*r.target, Reduce::atomic, DType::bf16));
  EXPECT_EQ(red.shape.grid_x, int((333LL * 4096 / 8 + kReduceThreads - 1) / kReduceThreads));
  const Step& align = *prog->find("align");
  EXPECT_EQ(align.shape.lds_bytes, align_lds_bytes(8));
  EXPECT_EQ(align.shape.block, kAlignThreads);
}

// 16-bit partials: no clear, a row per (token, slot) in the element type,
// the partials16 reduce kernel.
TEST(LayerProgram, SixteenBitPartialsHalveTheRowsAndUseTheirReduce) {
  Variant s2 = wgmma(StageRole::stage2, 64, 128, 4);
  s2.set("reduce", int(Reduce::partials16));
  EXPECT_TRUE(s2.name().ends_with("_partials16")) << s2.name();
  auto prog = build_program(recipe(wgmma(StageRole::stage1, 64, 128, 4), s2), 17);
  ASSERT_TRUE(prog) << prog.error().describe();
  EXPECT_EQ(step_names(*prog), (std::vector<std::string>{"align", "stage1", "stage2", "reduce"}));
  const Step& red = *prog->find("reduce");
  EXPECT_EQ(red.role, Role::reduce_partials16);
  EXPECT_EQ(red.symbol, reduce_entry(*s2.target, Reduce::partials16, DType::bf16));
  EXPECT_EQ(prog->bytes[std::size_t(Buf::y_acc)], 17u * 2 * 4096 * 2);
  // Split-K sums need atomics.
  s2.set("split_k", 2);
  EXPECT_FALSE(build_program(recipe(wgmma(StageRole::stage1, 64, 128, 4), s2), 17));
}

// The _y modes: stage 2 writes Y, so no reduce step; y_acc starts with the
// arrival counters (one per token and 32 columns), zeroed with the atomic sums
// (atomic_y) or alone (partials_y: the rows are written whole) -- by the
// one-block align itself up to kAlignClearWords, by a clear step above.
TEST(LayerProgram, DirectYLayersHaveNoReduceAndClearTheirCounters) {
  const Problem p = mixtral();
  EXPECT_EQ(direct_y_words(5, 4096), 5 * 128);
  EXPECT_EQ(direct_y_words(1, 2048), 64);   // 64 chunks: one 256-byte block of words
  EXPECT_EQ(direct_y_words(3, 2880), 320);  // 270 counters, rounded to 64 words
  for (const Reduce mode : kDirectYModes) {
    const bool atomic = mode == Reduce::atomic_y;
    Variant s2 = wgmma(StageRole::stage2, 64, 128, 4);
    s2.set("reduce", int(mode));
    EXPECT_TRUE(s2.name().ends_with(fmt::format("_{}", to_string(mode)))) << s2.name();
    const LayerRecipe r = recipe(wgmma(StageRole::stage1, 64, 128, 4), s2);
    for (const int tokens : {5, 333}) {
      auto prog = build_program(r, tokens);
      ASSERT_TRUE(prog) << prog.error().describe();
      const long long counters = direct_y_words(tokens, 4096), sums = tokens * 4096LL;
      const std::uint64_t clear = std::uint64_t(counters + (atomic ? sums : 0));
      EXPECT_EQ(y_acc_clear_words(mode, p, tokens), clear);
      EXPECT_EQ(prog->bytes[std::size_t(Buf::y_acc)], std::uint64_t(counters + (atomic ? 1 : 2) * sums) * 4);
      EXPECT_LE((long long)prog->bytes[std::size_t(Buf::y_acc)], y_acc_capacity(p, tokens));
      EXPECT_EQ(prog->find("reduce"), nullptr);
      const bool by_align = clear <= kAlignClearWords;
      EXPECT_EQ(by_align, tokens == 5) << to_string(mode) << " T=" << tokens;
      const std::vector<std::string> steps =
          by_align ? std::vector<std::string>{"align", "stage1", "stage2"}
                   : std::vector<std::string>{"clear_y_acc", "align", "stage1", "stage2"};
      EXPECT_EQ(step_names(*prog), steps) << to_string(mode) << " T=" << tokens;
      const int flags = prog->find("align")->args.flags;
      EXPECT_EQ(flags, by_align ? kFlagAlignClearsCounters | (atomic ? kFlagAlignClearsSums : 0) : 0);
      EXPECT_EQ(prog->find("stage2")->args.flags, 0);
      if (!by_align) { EXPECT_EQ(prog->steps[0].count, clear); }
    }
    // The atomic layer keeps its clear step whatever its size (old exports' aligns do not clear).
    EXPECT_EQ(build_program(recipe(wgmma(StageRole::stage1, 64, 128, 4), wgmma(StageRole::stage2, 64, 128, 4)), 5)->steps[0].name,
              "clear_y_acc");
    // Split-K: the atomic sums take it, the slot rows do not.
    s2.set("split_k", 2);
    EXPECT_EQ(bool(build_program(recipe(wgmma(StageRole::stage1, 64, 128, 4), s2), 5)), atomic) << to_string(mode);
  }
}

// Above kWideAlignPairs pairs the layer aligns in two launches of
// align_blocks(pairs) blocks, its count table after sorted_ids' rows; a recipe
// whose support unit lacks those kernels aligns in one block at any size.
TEST(LayerProgram, ManyPairsAlignInTwoWideLaunches) {
  const Problem p = mixtral();  // top-2
  const LayerRecipe r = recipe(wgmma(StageRole::stage1, 128, 128, 8), wgmma(StageRole::stage2, 128, 256, 8));
  const int small_t = int(kWideAlignPairs / 2), big_t = int(kWideAlignPairs / 2) + 1;
  auto small = build_program(r, small_t);
  ASSERT_TRUE(small) << small.error().describe();
  EXPECT_EQ(step_names(*small), (std::vector<std::string>{"clear_y_acc", "align", "stage1", "stage2", "reduce"}));
  EXPECT_EQ(small->bytes[std::size_t(Buf::sorted_ids)], std::uint64_t(small->max_padded_rows) * 4);
  auto big = build_program(r, big_t);
  ASSERT_TRUE(big) << big.error().describe();
  EXPECT_EQ(step_names(*big),
            (std::vector<std::string>{"clear_y_acc", "align_count", "align_scatter", "stage1", "stage2", "reduce"}));
  const int pairs = big_t * p.topk;
  for (const char* name : {"align_count", "align_scatter"}) {
    const Step& s = *big->find(name);
    EXPECT_EQ(s.shape.grid_x, align_blocks(pairs)) << name;
    EXPECT_EQ(s.shape.block, kAlignThreads) << name;
    EXPECT_GT(s.shape.grid_x, 1) << name;
  }
  EXPECT_EQ(big->find("align_count")->shape.lds_bytes, align_count_lds_bytes(p.experts));
  EXPECT_EQ(big->find("align_scatter")->shape.lds_bytes, align_scatter_lds_bytes(p.experts));
  EXPECT_EQ(big->find("align_count")->role, Role::align_count);
  EXPECT_EQ(big->bytes[std::size_t(Buf::sorted_ids)],
            std::uint64_t(big->max_padded_rows + align_table_words(pairs, p.experts)) * 4);
  EXPECT_LE(big->bytes[std::size_t(Buf::sorted_ids)] / 4, std::uint64_t(sorted_ids_capacity(p, big_t)));
  LayerRecipe old = r;
  old.wide_align = false;
  auto one = build_program(old, big_t);
  ASSERT_TRUE(one);
  EXPECT_EQ(step_names(*one), (std::vector<std::string>{"clear_y_acc", "align", "stage1", "stage2", "reduce"}));
  // The chunk grows so the grid stays at most 256 blocks.
  EXPECT_EQ(align_blocks(256 * 4096), 256);
  EXPECT_LE(align_blocks(256 * 4096 + 1), 256);
  EXPECT_LE(align_blocks(1 << 27), 256);
  EXPECT_GE((long long)align_blocks(1 << 27) * align_chunk(1 << 27), 1LL << 27);
}

// The workspace buffers placed one after another in one caller's workspace,
// each aligned, none overlapping, the inputs and outputs not among them.
TEST(LayerProgram, WorkspacePlacementCoversEveryWorkspaceBufferOnce) {
  const LayerRecipe r = recipe(wgmma(StageRole::stage1, 128, 128, 8), wgmma(StageRole::stage2, 128, 256, 8));
  for (int tokens : {1, 333, int(kWideAlignPairs)}) {
    auto prog = build_program(r, tokens);
    ASSERT_TRUE(prog);
    const WorkspacePlacement w = workspace_placement(*prog);
    std::uint64_t end = 0;
    for (std::size_t i = 0; i < kBufCount; ++i) {
      const Buf b = Buf(i);
      if (!is_workspace(b) || !prog->bytes[i]) continue;
      EXPECT_EQ(w.offset[i] % kWorkspaceAlign, 0u) << to_string(b);
      EXPECT_GE(w.offset[i], end) << to_string(b);
      end = w.offset[i] + prog->bytes[i];
    }
    EXPECT_GE(w.total, end);
    EXPECT_LT(w.total, end + kWorkspaceAlign);
    for (Buf b : {Buf::x, Buf::y, Buf::w1, Buf::topk_ids}) EXPECT_FALSE(is_workspace(b)) << to_string(b);
  }
}

TEST(LayerProgram, PartialsLayerHasNoClearAndSizesKRowsPerToken) {
  Variant s2 = wgmma(StageRole::stage2, 64, 128, 4);
  s2.set("reduce", int(Reduce::partials));
  auto prog = build_program(recipe(wgmma(StageRole::stage1, 64, 128, 4), s2), 17);
  ASSERT_TRUE(prog) << prog.error().describe();
  EXPECT_EQ(step_names(*prog), (std::vector<std::string>{"align", "stage1", "stage2", "reduce"}));
  EXPECT_EQ(prog->find("reduce")->role, Role::reduce_partials);
  EXPECT_EQ(prog->bytes[std::size_t(Buf::y_acc)], 17u * 2 * 4096 * 4);
  EXPECT_EQ(prog->bytes[std::size_t(Buf::inter)], 17u * 2 * 14336 * 2);
  EXPECT_EQ(prog->bytes[std::size_t(Buf::sorted_ids)], std::uint64_t(prog->max_padded_rows) * 4);
  EXPECT_EQ(prog->bytes[std::size_t(Buf::block_experts)], std::uint64_t(prog->max_padded_rows / 64) * 4);
}

// The row block is a multiple of both stages' tile_m, so no tile straddles
// two experts: the least common multiple, never just the larger tile.
TEST(LayerProgram, RowBlockIsTheLeastCommonMultipleOfTheTiles) {
  struct Case {
    int m1, m2, block;
  };
  for (const Case& c : {Case{64, 128, 128}, Case{64, 192, 192}, Case{128, 128, 128}, Case{192, 64, 192}}) {
    auto prog = build_program(recipe(wgmma(StageRole::stage1, c.m1, 128, c.m1 / 16), wgmma(StageRole::stage2, c.m2, 128, c.m2 / 16)), 512);
    ASSERT_TRUE(prog) << c.m1 << "+" << c.m2 << ": " << prog.error().describe();
    EXPECT_EQ(prog->align_block, c.block) << c.m1 << "+" << c.m2;
    EXPECT_EQ(prog->max_padded_rows % c.m1, 0);
    EXPECT_EQ(prog->max_padded_rows % c.m2, 0);
  }
  // 128 and 192 need blocks of 384 rows: refused (the mixtral T=512 export that ran wrong).
  auto bad = build_program(recipe(wgmma(StageRole::stage1, 128, 128, 8), wgmma(StageRole::stage2, 192, 128, 12)), 512);
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("384"), std::string::npos) << bad.error().message;
}

// A persistent stage launches ceil(tiles / tiles_per_block) blocks in x only
// (the grid rule the export once lacked).
TEST(LayerProgram, PersistentStageGridCoversEveryTileOnce) {
  Variant s2 = wgmma(StageRole::stage2, 128, 256, 8);
  s2.set("warp_specialized", true);
  s2.set("layout", int(WeightLayout::tiled));
  s2.set("split_k", 2);
  const Problem p = mixtral();
  auto plain = build_program(recipe(wgmma(StageRole::stage1, 128, 128, 8), s2), 4096);
  s2.set("tiles_per_block", 8);
  auto persistent = build_program(recipe(wgmma(StageRole::stage1, 128, 128, 8), s2), 4096);
  ASSERT_TRUE(plain && persistent);
  const LaunchShape& one = plain->find("stage2")->shape;
  const LaunchShape& many = persistent->find("stage2")->shape;
  const long long tiles = (long long)one.grid_x * one.grid_y * one.grid_z;
  EXPECT_EQ(one.grid_z, 2);
  EXPECT_EQ(many.grid_x, (tiles + 7) / 8);
  EXPECT_EQ(many.grid_y, 1);
  EXPECT_EQ(many.grid_z, 1);
  EXPECT_EQ(persistent->find("stage2")->w2, Buf::w2_tiled);
  EXPECT_EQ(persistent->find("stage1")->w1, Buf::w1);
  EXPECT_GT(persistent->bytes[std::size_t(Buf::w2_tiled)], 0u);
  EXPECT_EQ(persistent->bytes[std::size_t(Buf::w2)], 0u);
}

TEST(LayerProgram, StageAloneProgramsForTheSearch) {
  auto first = build_program(LayerRecipe{find_target("sm_90a"), mixtral(), {wgmma(StageRole::stage1, 64, 128, 4)}}, 5);
  ASSERT_TRUE(first) << first.error().describe();
  EXPECT_EQ(step_names(*first), (std::vector<std::string>{"align", "stage1"}));
  auto second = build_program(LayerRecipe{find_target("sm_90a"), mixtral(), {wgmma(StageRole::stage2, 64, 128, 4)}}, 5);
  ASSERT_TRUE(second) << second.error().describe();
  EXPECT_EQ(step_names(*second), (std::vector<std::string>{"clear_y_acc", "align", "stage2", "reduce"}));
  EXPECT_EQ(second->index_of("stage2"), 2u);
  EXPECT_EQ(second->index_of("stage1"), second->steps.size());
}

struct Refusal {
  const char* what;
  std::function<void(LayerRecipe&, int&)> change;
  const char* message;
};

class LayerProgramRefuses : public ::testing::TestWithParam<Refusal> {};

TEST_P(LayerProgramRefuses, WithAReason) {
  LayerRecipe r = recipe(wgmma(StageRole::stage1, 64, 128, 4), wgmma(StageRole::stage2, 64, 128, 4));
  int tokens = 16;
  GetParam().change(r, tokens);
  auto prog = build_program(r, tokens);
  ASSERT_FALSE(prog) << GetParam().what;
  EXPECT_EQ(prog.error().code, Errc::invalid_input);
  EXPECT_NE(prog.error().message.find(GetParam().message), std::string::npos) << prog.error().message;
}

INSTANTIATE_TEST_SUITE_P(
    Recipes, LayerProgramRefuses,
    ::testing::Values(
        Refusal{"swapped kinds", [](LayerRecipe& r, int&) { std::swap(r.stages[0], r.stages[1]); }, "out of the operation's order"},
        Refusal{"one role twice", [](LayerRecipe& r, int&) { r.stages[1] = r.stages[0]; }, "out of the operation's order"},
        Refusal{"weight placement", [](LayerRecipe& r, int&) { r.stage(StageRole::stage1)->set("weight_in_stage1", 1); }, "routed weight"},
        Refusal{"dtype", [](LayerRecipe& r, int&) { r.problem.dtype = DType::f16; }, "the problem f16"},
        Refusal{"tile_n", [](LayerRecipe& r, int&) { r.problem.inter = 100; }, "inter 100 is not a multiple of tile_n"},
        Refusal{"no stage", [](LayerRecipe& r, int&) { r.stages.clear(); }, "no stage variant"},
        Refusal{"zero tokens", [](LayerRecipe&, int& t) { t = 0; }, "outside 1.."},
        Refusal{"too many tokens", [](LayerRecipe&, int& t) { t = kMaxTokens + 1; }, "outside 1.."},
        Refusal{"32-bit rows", [](LayerRecipe& r, int& t) { r.problem.topk = 200, r.problem.experts = 256, t = kMaxTokens; },
                "overflow"}),
    [](const auto& info) {
      std::string n = info.param.what;
      std::replace_if(n.begin(), n.end(), [](char c) { return !std::isalnum(static_cast<unsigned char>(c)); }, '_');
      return n;
    });

// Two programs of one recipe and T are identical as data (the runtime compares
// a manifest's recorded steps with its own program this way).
TEST(LayerProgram, StepsAsDataAreStableAndSayWhichWeightsAStageReads) {
  Variant s1 = wgmma(StageRole::stage1, 64, 128, 4);
  s1.set("warp_specialized", true);
  s1.set("layout", int(WeightLayout::tiled));
  const LayerRecipe r = recipe(s1, wgmma(StageRole::stage2, 64, 128, 4));
  const nlohmann::json a = steps_json(*build_program(r, 100)), b = steps_json(*build_program(r, 100));
  EXPECT_EQ(a, b);
  EXPECT_NE(a, steps_json(*build_program(r, 101)));
  EXPECT_EQ(a[2]["step"], "stage1");
  EXPECT_EQ(a[2]["args"]["w1"], "w1_tiled");
  EXPECT_EQ(a[3]["args"]["w2"], "w2");
  EXPECT_EQ(a[0]["count"], 100 * 4096);
}

}  // namespace
}  // namespace ft

namespace ft {
namespace {

// The caller's fp8 scale tensors: one shape rule (scale_shape) for the buffer
// sizes, the manifest and the C API. Table: mode -> shapes of x_scale, w1, w2, inter_scale.
TEST(LayerProgram, Fp8ScaleShapesByMode) {
  Problem p;
  p.experts = 8, p.hidden = 512, p.inter = 256, p.topk = 2, p.dtype = DType::e4m3;
  struct Row {
    Scales mode;
    std::vector<long long> x, w1, w2, inter = {};
  };
  const Row rows[] = {{Scales::per_tensor, {1}, {8}, {8}},
                      {Scales::per_token, {}, {8, 512}, {8, 512}},
                      {Scales::block128, {}, {8, 4, 4}, {8, 4, 2}},
                      {Scales::static_tensor, {1}, {8}, {8}, {1}}};
  auto dims = [](const ScaleShape& s) { return std::vector<long long>(s.dims.begin(), s.dims.begin() + s.rank); };
  for (const Row& r : rows) {
    p.scales = r.mode;
    EXPECT_EQ(dims(scale_shape(p, Buf::x_scale)), r.x) << to_string(r.mode);
    EXPECT_EQ(dims(scale_shape(p, Buf::w1_scales)), r.w1) << to_string(r.mode);
    EXPECT_EQ(dims(scale_shape(p, Buf::w2_scales)), r.w2) << to_string(r.mode);
    EXPECT_EQ(dims(scale_shape(p, Buf::inter_scale)), r.inter) << to_string(r.mode);
    EXPECT_EQ(scale_shape(p, Buf::w1_scales).count(), weight_scale_count(r.mode, 8, 512, 512)) << to_string(r.mode);
    EXPECT_EQ(scale_shape(p, Buf::w2_scales).count(), weight_scale_count(r.mode, 8, 512, 256)) << to_string(r.mode);
    EXPECT_EQ(scale_shape(p, Buf::x).rank, 0);
  }
  p.dtype = DType::bf16, p.scales = Scales::none;
  EXPECT_EQ(scale_shape(p, Buf::w1_scales).rank, 0);
  EXPECT_EQ(scale_shape(p, Buf::w1_scales).count(), 0);
}

}  // namespace
}  // namespace ft
