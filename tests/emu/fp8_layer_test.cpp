// fp8 MoE layers through the emulator: quantise_x, align, stage 1 on e4m3 codes
// (dequantised by each scale mode; the intermediate quantised on store or by the
// quantise_inter step), stage 2 with the intermediate's group scales promoted
// in its GEMM, reduce -- for sm_90a's wgmma (stage 1 also with fast
// accumulation, promote = 0, on the shared ring and with a producer
// warpgroup, and promoting every 4 k-tiles; both stages promoting in a
// producer warpgroup's consumers, on one and two consumer warpgroups, split-K
// slices included) and mma.sync atoms and the MFMA
// e4m3 atoms of gfx942 (fnuz) and gfx950 (OCP), at T = 1, 7, 33 with an expert that
// gets no tokens, against the CPU reference from the dequantised inputs (the
// check of fp8 GEMMs: diff = 1 - 2<y, ref> / (|y|^2 + |ref|^2) <= 1e-3, plus rel
// L2 and max bounds, measure/workload/compare.hpp), and against the bf16 layer
// on the same dequantised weights within the sanity bound. Mutants must fail:
// W1's or W2's scales read one index off; a saturating activation scale (the
// sanity bound's case); W2's block scales one index off in the layer whose
// stages promote in a producer warpgroup's consumers (a promotion paired with
// the neighbouring group's scale); a layer whose stage 2 reads row scales
// with its quantise_inter step writing group scales (the program's flag
// dropped). Stage 2 reading row scales (per-tensor, per-token): fast
// accumulation on the shared ring, m128n256 in a producer warpgroup's
// consumers, persistent producer blocks, promoting every 4 in split-K slices.
#include <gtest/gtest.h>

#include <algorithm>

#include "generator/families/families.hpp"
#include "tests/emu/layer_support.hpp"
#include "measure/workload/half.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft::emu::test {
namespace {

struct Shape {
  int tile_m, tile_n1, tile_n2, tile_k, warps_m, warps_n, stages;
  bool quantise_on_store, weight_in_stage1, shuffled;
  Reduce reduce;
  int split_k;
  int promote = 1;  // stage 1's promote axis (wgmma, per-tensor / per-token): every n k-tiles, 0 never
  int producer_tiles = 0;  // wgmma stage 1 with a producer warpgroup (tiled weights), this many tiles per block; 0: none
  int producer2_tiles = 0;  // the same for stage 2
  bool row_scales = false;  // stage 2 reads one intermediate scale per row (InterScales::row) ...
  int promote2 = 1;         // ... and promotes every n k-tiles, 0 never
};

Variant fp8_variant(const Target& t, StageRole role, const AtomInfo& atom, Scales scales, const Shape& s) {
  Variant v = Variant::of(t, role, atom);
  v.set("tile_m", s.tile_m).set("tile_n", role == StageRole::stage1 ? s.tile_n1 : s.tile_n2);
  v.set("warps_m", s.warps_m).set("warps_n", s.warps_n).set("stages", s.stages);
  v.set("tile_k", atom.warpgroup() ? 128 : s.tile_k);
  v.set("scales", int(scales)).set("weight_in_stage1", s.weight_in_stage1);
  v.set("layout", int(s.shuffled && !atom.warpgroup() ? WeightLayout::shuffled : WeightLayout::plain));
  if (role == StageRole::stage1) {
    v.set("inter_store", int(s.quantise_on_store ? InterStore::fp8 : InterStore::bf16));
    if (v.has("promote")) v.set("promote", s.promote);
    if (s.producer_tiles > 0) {
      v.set("warp_specialized", 1).set("tiles_per_block", s.producer_tiles);
      v.set("layout", int(WeightLayout::tiled));
    }
  } else {
    v.set("reduce", int(s.reduce)).set("split_k", s.split_k);
    if (s.row_scales) v.set("inter_scales", int(InterScales::row)).set("promote", s.promote2);
    if (s.producer2_tiles > 0) {
      v.set("warp_specialized", 1).set("tiles_per_block", s.producer2_tiles);
      v.set("layout", int(WeightLayout::tiled));
    }
  }
  return v;
}

// A few layers per target and scale mode: every fp8 atom, both intermediate
// hand-overs where the registers allow quantise-on-store, every reduction,
// split-K (slices of whole and of half scale groups), both routed-weight
// placements, plain and shuffled weights.
std::vector<LayerPlan> fp8_plans(const Target& t, Scales scales) {
  std::vector<LayerPlan> plans;
  for (const AtomInfo* atom : atoms_for(t, DType::e4m3)) {
    std::vector<Shape> shapes;
    if (atom->warpgroup()) {
      // A promoting stage 1 (block128 always) keeps 128 + 128 accumulators: no
      // room for N = 256 (quantise-on-store); with scales constant along k it
      // runs without promotion (promote = 0).
      const bool qstore = scales != Scales::block128;
      shapes = {{64, qstore ? 128 : 64, 128, 128, 4, 1, 3, qstore, false, false, Reduce::atomic, 1, qstore ? 0 : 1},
                {128, 64, 64, 128, 8, 1, 4, false, true, false, Reduce::partials16, 1},
                {64, 32, 64, 128, 4, 1, 3, false, false, false, Reduce::atomic, 2}};
      // Scales constant along k: the m128n128 stage 1 without promotion (one
      // accumulator set; quantise-on-store), and promoting every 4 k-tiles
      // (H = 256 is two k-tiles: only the last one promotes).
      if (scales != Scales::block128) {
        shapes.push_back({128, 128, 64, 128, 8, 1, 3, true, true, false, Reduce::atomic, 1, 0});
        shapes.push_back({128, 64, 64, 128, 8, 1, 3, false, false, false, Reduce::atomic, 2, 4});
        // Fast accumulation with a producer warpgroup (bulk copies of tiled
        // fp8 weights): one tile per block, and a persistent block of 8.
        shapes.push_back({128, 128, 64, 128, 8, 1, 4, false, false, false, Reduce::atomic, 1, 0, 1});
        shapes.push_back({64, 64, 64, 128, 4, 1, 3, false, true, false, Reduce::partials16, 1, 0, 8});
      }
      // Promotion in a producer warpgroup's consumers, both stages (stage 1
      // promoting every k-tile, every 4 where the scales allow; block128's
      // W1 block scales): two consumer warpgroups with stage 2 in split-K
      // slices (groups counted from the slice's k), and one warpgroup.
      // (Persistent blocks do not promote: the legality refuses them.)
      const int every = scales == Scales::block128 ? 1 : 4;
      shapes.push_back({128, 64, 64, 128, 8, 1, 4, false, false, false, Reduce::atomic, 2, 1, 1, 1});
      shapes.push_back({64, 64, 128, 128, 4, 1, 3, false, true, false, Reduce::partials16, 1, every, 1, 1});
      // Stage 2 on row scales (constant along k): fast accumulation on the
      // shared ring; m128n256 (one accumulator set) in a producer warpgroup's
      // consumers; persistent producer blocks; promoting every 4 k-tiles in
      // split-K slices.
      if (scales != Scales::block128) {
        shapes.push_back({64, 64, 128, 128, 4, 1, 3, false, false, false, Reduce::atomic, 1, 1, 0, 0, true, 0});
        shapes.push_back({128, 128, 256, 128, 8, 1, 4, false, true, false, Reduce::partials16, 1, 0, 1, 1, true, 0});
        shapes.push_back({64, 64, 128, 128, 4, 1, 3, false, false, false, Reduce::atomic, 1, 0, 8, 8, true, 0});
        shapes.push_back({128, 64, 64, 128, 8, 1, 4, false, false, false, Reduce::atomic, 2, 1, 0, 1, true, 4});
      }
    } else {
      const int m = atom->m;
      shapes = {{2 * m, 128, 64, 64, 2, 2, 2, true, false, false, Reduce::atomic, 1},
                {2 * m, 64, 64, 32, 2, 2, 1, false, true, true, Reduce::partials, 1},
                {2 * m, 64, 128, 128, 2, 2, 2, false, false, true, Reduce::atomic, 2},
                // split-K slices of 64 (I = 512 / 8): each ends inside a 128-deep scale group
                {2 * m, 64, 64, 32, 2, 2, 2, false, false, false, Reduce::atomic, 8}};
      if (scales == Scales::block128) shapes[2].tile_n2 = 64;  // block128: tile_n divides 128
    }
    for (const Shape& s : shapes) {
      LayerPlan plan;
      plan.stage1 = fp8_variant(t, StageRole::stage1, *atom, scales, s);
      plan.stage2 = fp8_variant(t, StageRole::stage2, *atom, scales, s);
      plans.push_back(plan);
    }
  }
  return plans;
}

const Case& fp8_case(const Target& t, Scales scales, int tokens) {
  return case_for(DType::e4m3, tokens, 5, scales, fp8_format_of(t));
}

using Fp8Param = std::tuple<const char*, Scales>;

class EmuFp8Layer : public ::testing::TestWithParam<Fp8Param> {};

TEST_P(EmuFp8Layer, MatchesTheDequantisedReference) {
  const Target& t = target(std::get<0>(GetParam()));
  const Scales scales = std::get<1>(GetParam());
  const std::vector<LayerPlan> plans = fp8_plans(t, scales);
  ASSERT_FALSE(plans.empty()) << t.name << " has no fp8 atoms";
  TargetBench& bench = TargetBench::of(t);
  for (const LayerPlan& plan : plans) {
    for (const Variant* v : {&plan.stage1, &plan.stage2}) {
      const auto why = why_illegal(*v, small_problem(DType::e4m3, scales));
      ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
    }
    auto kernels = bench.kernels(plan);
    ASSERT_TRUE(kernels) << kernels.error().describe();
    const int ref = plan.stage1.contract().weight_in_stage1 ? 1 : 0;
    for (int tokens : kTokenCounts) {
      const Case& c = fp8_case(t, scales, tokens);
      auto dw = DeviceWorkload::upload(bench.device(), c.workload);
      ASSERT_TRUE(dw) << dw.error().describe();
      auto run = run_layer(*dw, *kernels, plan, {.read_intermediates = true});
      ASSERT_TRUE(run) << plan_label(plan) << " T=" << tokens << ": " << run.error().describe();
      EXPECT_EQ(run->bad_ids, 0);
      // A stage 2 on row scales is held to the reference quantised per row.
      const ReferenceOutput& want_ref = fp8::inter_row_scales(plan.stage2) ? c.row_scales[ref] : c.reference[ref];
      const Comparison y = compare_output(run->y, want_ref.y, DType::e4m3);
      EXPECT_TRUE(y.passed) << plan_label(plan) << " T=" << tokens << ": " << y.summary(std::size_t(c.workload.problem.hidden));
      // The sanity bound: the bf16 layer on the same dequantised weights.
      const Comparison sane = compare_output(run->y, c.bf16_layer[ref].y, DType::e4m3, fp8_sanity_tolerance());
      EXPECT_TRUE(sane.passed) << plan_label(plan) << " T=" << tokens << " against the bf16 layer: " << sane.summary();
      // The intermediate stage 2 read, dequantised, on the rows of pairs that have an expert.
      const Workload& w = c.workload;
      const long long I = w.problem.inter;
      const auto got = dequantise_rows(run->inter_q, run->inter_scales, I, w.fp8_format);
      const auto want = dequantise_rows(want_ref.inter_q, want_ref.inter_scales, I, w.fp8_format);
      std::vector<float> got_rows, want_rows;
      for (std::size_t pair = 0; pair < w.topk_ids.size(); ++pair) {
        if (w.topk_ids[pair] < 0) continue;
        got_rows.insert(got_rows.end(), got.begin() + long(pair * I), got.begin() + long((pair + 1) * I));
        want_rows.insert(want_rows.end(), want.begin() + long(pair * I), want.begin() + long((pair + 1) * I));
      }
      const Comparison inter = compare_values(got_rows, want_rows, tolerance_for(DType::e4m3));
      EXPECT_TRUE(inter.passed) << plan_label(plan) << " T=" << tokens << " intermediate: " << inter.summary(std::size_t(I));
      RecordProperty(fmt::format("{}_T{}", plan.stage1.name(), tokens), y.summary());
      RecordProperty(fmt::format("{}_T{}_bf16_layer", plan.stage1.name(), tokens), sane.summary());
    }
  }
}

// A kernel that reads its weight scales one index off (scale i + 1 for i):
// the device copy of the scales rotated by one must fail the comparison.
void expect_rotated_weight_scales_fail(const LayerPlan& plan, Scales scales, int which) {
  const Target& t = *plan.stage1.target;
  TargetBench& bench = TargetBench::of(t);
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  const Case& c = fp8_case(t, scales, 33);
  auto dw = DeviceWorkload::upload(bench.device(), c.workload);
  ASSERT_TRUE(dw) << dw.error().describe();
  std::vector<float> rotated = which == 1 ? c.workload.w1_scales : c.workload.w2_scales;
  std::rotate(rotated.begin(), rotated.begin() + 1, rotated.end());
  DeviceBuffer& buffer = which == 1 ? dw->w1_scales : dw->w2_scales;
  ASSERT_TRUE(bench.device().copy_to_device(buffer.ptr(), rotated.data(), rotated.size() * 4));
  auto run = run_layer(*dw, *kernels, plan, {});
  ASSERT_TRUE(run) << run.error().describe();
  const Comparison y = compare_output(run->y, c.reference[0].y, DType::e4m3);
  EXPECT_FALSE(y.passed) << plan_label(plan) << ": W" << which << " scales one off still pass: " << y.summary();
  EXPECT_GT(y.diff, 1e-3) << y.summary();
}

class EmuFp8Mutant : public ::testing::TestWithParam<std::tuple<Scales, int>> {};

TEST_P(EmuFp8Mutant, WeightScalesOneIndexOffFail) {
  const auto [scales, which] = GetParam();
  expect_rotated_weight_scales_fail(fp8_plans(target("sm_90a"), scales).front(), scales, which);
}

// block128: both stages promote in a producer warpgroup's consumers (two
// consumer warpgroups, split-K stage 2), so W1's and W2's block scales are read
// only by that promotion; one index off (the next k group's scale) must fail.
TEST(EmuFp8ProducerPromotion, WeightBlockScalesOneIndexOffFail) {
  const std::vector<LayerPlan> plans = fp8_plans(target("sm_90a"), Scales::block128);
  const auto plan = std::ranges::find_if(plans, [](const LayerPlan& p) {
    return p.stage1.get("warp_specialized") && p.stage2.get("warp_specialized");
  });
  ASSERT_NE(plan, plans.end()) << "no block128 layer promotes in producer warpgroups";
  for (int which : {1, 2}) expect_rotated_weight_scales_fail(*plan, Scales::block128, which);
}

// Stage 2 reading row scales while the layer's quantise_inter step writes 1 x
// 128 group scales (the program's kFlagInterRowScales dropped): slot 0 of a
// row is then its first group's scale, not the row's, and the layer must fail
// the row-quantised reference; with the flag it passes (the row tests above).
TEST(EmuFp8RowScales, GroupScalesUnderARowScaleStage2Fail) {
  const Target& t = target("sm_90a");
  const std::vector<LayerPlan> plans = fp8_plans(t, Scales::per_tensor);
  const auto plan = std::ranges::find_if(plans, [](const LayerPlan& p) { return fp8::inter_row_scales(p.stage2); });
  ASSERT_NE(plan, plans.end()) << "no per-tensor layer reads row scales";
  TargetBench& bench = TargetBench::of(t);
  auto kernels = bench.kernels(*plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  const Case& c = fp8_case(t, Scales::per_tensor, 33);
  auto dw = DeviceWorkload::upload(bench.device(), c.workload);
  ASSERT_TRUE(dw) << dw.error().describe();
  const int ref = plan->stage1.contract().weight_in_stage1 ? 1 : 0;
  auto drop_flag = [](LayerProgram& prog) {
    for (Step& s : prog.steps) s.args.flags &= ~kFlagInterRowScales;
  };
  auto run = run_layer(*dw, *kernels, *plan, {.edit_program = drop_flag});
  ASSERT_TRUE(run) << run.error().describe();
  const Comparison y = compare_output(run->y, c.row_scales[ref].y, DType::e4m3);
  EXPECT_FALSE(y.passed) << plan_label(*plan) << ": group scales under a row-scale stage 2 still pass: " << y.summary();
  // The pairing with a stage 1 that quantises on store (group scales) is refused.
  LayerPlan qstore = *plan;
  qstore.stage1.set("inter_store", int(InterStore::fp8));
  auto prog = build_program(qstore.recipe(c.workload.problem), 33);
  ASSERT_FALSE(prog) << "a quantise-on-store stage 1 paired with a row-scale stage 2";
  EXPECT_NE(prog.error().describe().find("row intermediate scales"), std::string::npos) << prog.error().describe();
}

// A static activation scale 64x too small saturates most of X: the kernel and
// the fp8 reference agree (both quantise the same way), and only the sanity
// bound against the bf16 layer catches it.
TEST(EmuFp8Sanity, ASaturatingActivationScalePassesTheFp8CheckButNotTheBf16Bound) {
  const Target& t = target("sm_90a");
  const LayerPlan plan = fp8_plans(t, Scales::per_tensor).front();
  TargetBench& bench = TargetBench::of(t);
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  Workload w = fp8_case(t, Scales::per_tensor, 33).workload;
  w.x_scale[0] /= 64;
  const ReferenceOutput fp8_ref = reference_layer(w, {});
  const ReferenceOutput bf16_ref = reference_layer(w, {.quantise_activations = false});
  auto dw = DeviceWorkload::upload(bench.device(), w);
  ASSERT_TRUE(dw) << dw.error().describe();
  auto run = run_layer(*dw, *kernels, plan, {});
  ASSERT_TRUE(run) << run.error().describe();
  const Comparison y = compare_output(run->y, fp8_ref.y, DType::e4m3);
  EXPECT_TRUE(y.passed) << y.summary();
  const Comparison sane = compare_output(run->y, bf16_ref.y, DType::e4m3, fp8_sanity_tolerance());
  EXPECT_FALSE(sane.passed) << "a saturated X stays within the sanity bound: " << sane.summary();
  RecordProperty("fp8_check", y.summary());
  RecordProperty("bf16_layer", sane.summary());
}

INSTANTIATE_TEST_SUITE_P(Sm90a, EmuFp8Mutant,
                         ::testing::Combine(::testing::Values(Scales::per_tensor, Scales::per_token, Scales::block128),
                                            ::testing::Values(1, 2)),
                         [](const ::testing::TestParamInfo<std::tuple<Scales, int>>& info) {
                           std::string s(to_string(std::get<0>(info.param)));
                           std::erase(s, '-');
                           return fmt::format("{}_w{}", s, std::get<1>(info.param));
                         });

std::string fp8_name(const ::testing::TestParamInfo<Fp8Param>& info) {
  std::string s(to_string(std::get<1>(info.param)));
  std::erase(s, '-');
  return fmt::format("{}_{}", std::get<0>(info.param), s);
}

INSTANTIATE_TEST_SUITE_P(Sm90a, EmuFp8Layer,
                         ::testing::Combine(::testing::Values("sm_90a"),
                                            ::testing::Values(Scales::per_tensor, Scales::per_token, Scales::block128)),
                         fp8_name);

// The tiled family's fp8 atoms on AMD: MFMA e4m3fnuz (gfx942) and OCP e4m3 (gfx950).
INSTANTIATE_TEST_SUITE_P(Amd, EmuFp8Layer,
                         ::testing::Combine(::testing::Values("gfx942", "gfx950"),
                                            ::testing::Values(Scales::per_tensor, Scales::per_token, Scales::block128)),
                         fp8_name);

}  // namespace
}  // namespace ft::emu::test
