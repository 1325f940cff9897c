// fp8 layers with a static intermediate scale (Scales::static_tensor, "static":
// per-tensor weights, the caller's static x_scale and inter_scale) through the
// emulator: quantise_x, align, stage 1 quantising on store with inter_scale
// (no quantise_inter step, no bf16 intermediate), stage 2 reading it from the
// scale slots stage 1 filled, reduce -- sm_90a's wgmma (the shared ring and a
// producer warpgroup's consumers, fast accumulation and promoting, stage 2 on
// row scales) and gfx942's MFMA e4m3fnuz (the tiled family: stage 2 reads the
// slots as group scales), at T = 1, 7, 33 with an expert that gets no tokens,
// against the CPU reference quantising h with the workload's calibrated scale
// (measure/workload/reference.hpp calibrated_inter_scale), the intermediate
// itself, and the sanity bound of the bf16 layer. Mutants must fail: stage 1
// storing its codes with scale 1, and stage 1 leaving the scale slots unset.
#include <gtest/gtest.h>

#include <algorithm>

#include "generator/families/families.hpp"
#include "tests/emu/layer_support.hpp"
#include "templates/ft/moe_inter_scales.hpp"

namespace ft::emu::test {
namespace {

struct Shape {
  int tile_m, tile_n1, tile_n2, warps_m, stages;
  bool weight_in_stage1;
  Reduce reduce;
  int split_k = 1;
  int promote1 = 0, promote2 = 0;  // wgmma: every n k-tiles, 0 never
  bool producer = false;           // wgmma: both stages in a producer warpgroup's consumers (tiled weights)
};

Variant static_variant(const Target& t, StageRole role, const AtomInfo& atom, const Shape& s) {
  Variant v = Variant::of(t, role, atom);
  v.set("tile_m", s.tile_m).set("tile_n", role == StageRole::stage1 ? s.tile_n1 : s.tile_n2);
  v.set("scales", int(Scales::static_tensor)).set("weight_in_stage1", s.weight_in_stage1);
  if (atom.warpgroup()) {
    v.set("warps_m", s.warps_m).set("warps_n", 1).set("stages", s.stages).set("tile_k", 128);
    v.set("promote", role == StageRole::stage1 ? s.promote1 : s.promote2);
    if (role == StageRole::stage2) v.set("inter_scales", int(InterScales::row));
    if (s.producer) v.set("warp_specialized", 1).set("layout", int(WeightLayout::tiled));
  } else {
    v.set("warps_m", 2).set("warps_n", 2).set("stages", s.stages).set("tile_k", 64);
  }
  if (role == StageRole::stage2) v.set("reduce", int(s.reduce)).set("split_k", s.split_k);
  return v;
}

std::vector<LayerPlan> static_plans(const Target& t) {
  std::vector<LayerPlan> plans;
  for (const AtomInfo* atom : atoms_for(t, DType::e4m3)) {
    std::vector<Shape> shapes;
    if (atom->warpgroup())
      shapes = {{64, 128, 128, 4, 3, false, Reduce::atomic},
                {128, 128, 64, 8, 4, true, Reduce::partials16, 1, 0, 0, true},
                {128, 64, 64, 8, 3, false, Reduce::atomic, 2, 1, 4}};
    else
      shapes = {{2 * atom->m, 64, 64, 0, 2, false, Reduce::atomic, 2}, {2 * atom->m, 128, 128, 0, 1, true, Reduce::partials}};
    for (const Shape& s : shapes) {
      LayerPlan plan;
      plan.stage1 = static_variant(t, StageRole::stage1, *atom, s);
      plan.stage2 = static_variant(t, StageRole::stage2, *atom, s);
      plans.push_back(plan);
    }
  }
  return plans;
}

const Case& static_case(const Target& t, int tokens) {
  return case_for(DType::e4m3, tokens, 5, Scales::static_tensor, fp8_format_of(t));
}

// The intermediate of the rows with an expert, dequantised, against the reference's.
Comparison compare_intermediate(const LayerResult& run, const Case& c, int ref) {
  const Workload& w = c.workload;
  const long long I = w.problem.inter;
  const auto got = dequantise_rows(run.inter_q, run.inter_scales, I, w.fp8_format);
  const auto want = dequantise_rows(c.reference[ref].inter_q, c.reference[ref].inter_scales, I, w.fp8_format);
  std::vector<float> got_rows, want_rows;
  for (std::size_t pair = 0; pair < w.topk_ids.size(); ++pair) {
    if (w.topk_ids[pair] < 0) continue;
    got_rows.insert(got_rows.end(), got.begin() + long(pair * I), got.begin() + long((pair + 1) * I));
    want_rows.insert(want_rows.end(), want.begin() + long(pair * I), want.begin() + long((pair + 1) * I));
  }
  return compare_values(got_rows, want_rows, tolerance_for(DType::e4m3));
}

class EmuFp8Static : public ::testing::TestWithParam<const char*> {};

TEST_P(EmuFp8Static, MatchesTheReferenceQuantisedWithTheStaticScale) {
  const Target& t = target(GetParam());
  const std::vector<LayerPlan> plans = static_plans(t);
  ASSERT_FALSE(plans.empty()) << t.name << " has no fp8 atoms";
  TargetBench& bench = TargetBench::of(t);
  const Problem problem = small_problem(DType::e4m3, Scales::static_tensor);
  for (const LayerPlan& plan : plans) {
    for (const Variant* v : {&plan.stage1, &plan.stage2}) {
      const auto why = why_illegal(*v, problem);
      ASSERT_FALSE(why) << v->name() << " is illegal: " << *why;
    }
    auto prog = build_program(plan.recipe(problem), 7);
    ASSERT_TRUE(prog) << prog.error().describe();
    EXPECT_EQ(prog->find("quantise_inter"), nullptr) << plan_label(plan);
    auto kernels = bench.kernels(plan);
    ASSERT_TRUE(kernels) << kernels.error().describe();
    const int ref = plan.stage1.contract().weight_in_stage1 ? 1 : 0;
    for (int tokens : kTokenCounts) {
      const Case& c = static_case(t, tokens);
      ASSERT_EQ(c.workload.inter_scale.size(), 1u);
      auto dw = DeviceWorkload::upload(bench.device(), c.workload);
      ASSERT_TRUE(dw) << dw.error().describe();
      auto run = run_layer(*dw, *kernels, plan, {.read_intermediates = true});
      ASSERT_TRUE(run) << plan_label(plan) << " T=" << tokens << ": " << run.error().describe();
      EXPECT_EQ(run->bad_ids, 0);
      const Comparison y = compare_output(run->y, c.reference[ref].y, DType::e4m3);
      EXPECT_TRUE(y.passed) << plan_label(plan) << " T=" << tokens << ": " << y.summary(std::size_t(problem.hidden));
      const Comparison sane = compare_output(run->y, c.bf16_layer[ref].y, DType::e4m3, fp8_sanity_tolerance());
      EXPECT_TRUE(sane.passed) << plan_label(plan) << " T=" << tokens << " against the bf16 layer: " << sane.summary();
      const Comparison inter = compare_intermediate(*run, c, ref);
      EXPECT_TRUE(inter.passed) << plan_label(plan) << " T=" << tokens << " intermediate: " << inter.summary();
      // Every scale slot of a row with an expert holds the static scale, bit for bit.
      const std::size_t groups = std::size_t(problem.inter / kScaleGroup);
      for (std::size_t pair = 0; pair < c.workload.topk_ids.size(); ++pair)
        for (std::size_t g = 0; g < groups && c.workload.topk_ids[pair] >= 0; ++g)
          ASSERT_EQ(run->inter_scales[pair * groups + g], c.workload.inter_scale[0]) << plan_label(plan) << " pair " << pair;
      RecordProperty(fmt::format("{}_T{}", plan.stage1.name(), tokens), y.summary());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, EmuFp8Static, ::testing::Values("sm_90a", "gfx942"));

// Stage 1 with its store replaced (an explicit specialisation of store_static
// for the unit's Config): codes of scale 1 under the static scale's slots, or
// the right codes with the slots never written (left poisoned).
KernelSource mutant_store(const Variant& v, bool unit_scale) {
  const std::string body = unit_scale ? R"(
  const long long I = p.inter_size;
  u8 q[N];
  FT_UNROLL for (int s = 0; s < N; ++s) q[s] = fp8_quantise<Gemm::Atom::element>(h[s], 1.0f);  // the mutant: scale 1
  copy_bytes<u8, N>(p.inter_q + (long long)id * I + c, q);
  if (c % kScaleGroup == 0) p.inter_scales[(long long)id * (I / kScaleGroup) + c / kScaleGroup] = scale;
)"
                                      : R"(
  const long long I = p.inter_size;
  u8 q[N];
  FT_UNROLL for (int s = 0; s < N; ++s) q[s] = fp8_quantise<Gemm::Atom::element>(h[s], scale);
  copy_bytes<u8, N>(p.inter_q + (long long)id * I + c, q);  // the mutant: no scale slot written
)";
  return with_code_before_kernel(v,
                                 "template <> template <int N>\nFT_DEVICE void ft::Stage1<Config>::store_static("
                                 "const MoeArgs& p, int id, int c, const float (&h)[N], float scale) {" +
                                     body + "}\n",
                                 unit_scale ? "_mutant_unit_scale" : "_mutant_no_slots");
}

class EmuFp8StaticMutant : public ::testing::TestWithParam<std::tuple<const char*, bool>> {};

TEST_P(EmuFp8StaticMutant, Fails) {
  const auto [name, unit_scale] = GetParam();
  const Target& t = target(name);
  TargetBench& bench = TargetBench::of(t);
  const LayerPlan plan = static_plans(t).front();
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  auto mutant = bench.entry(mutant_store(plan.stage1, unit_scale), plan.stage1.name());
  ASSERT_TRUE(mutant) << mutant.error().describe();
  RoleKernels k = *kernels;
  k.of(Role::stage1) = *mutant;
  const Case& c = static_case(t, 33);
  auto dw = DeviceWorkload::upload(bench.device(), c.workload);
  ASSERT_TRUE(dw) << dw.error().describe();
  auto run = run_layer(*dw, k, plan);
  ASSERT_TRUE(run) << run.error().describe();
  const Comparison y = compare_output(run->y, c.reference[0].y, DType::e4m3);
  EXPECT_FALSE(y.passed) << plan_label(plan) << (unit_scale ? ": codes of scale 1" : ": scale slots unset") << " still pass: "
                         << y.summary();
}

INSTANTIATE_TEST_SUITE_P(Targets, EmuFp8StaticMutant,
                         ::testing::Combine(::testing::Values("sm_90a", "gfx942"), ::testing::Bool()),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, bool>>& info) {
                           return fmt::format("{}_{}", std::get<0>(info.param), std::get<1>(info.param) ? "unit_scale" : "no_slots");
                         });

}  // namespace
}  // namespace ft::emu::test
