// LayerBench -- what flytune verify, the search and its worker measure with --
// on the CPU emulator: stages alone and whole layers through the layer
// program, verified against the device reference kernels, timed by events
// and by graph replay; masked (-1) routing slots pass, bad ids are refused.
#include <gtest/gtest.h>

#include "tests/emu/layer_support.hpp"
#include "measure/layer_bench.hpp"
#include "measure/workload/workload.hpp"
#include "generator/emitter.hpp"

namespace ft::emu::test {
namespace {

struct Bench {
  std::unique_ptr<LayerBench> bench;
  LayerPlan plan;
  FunctionHandle f1, f2;
  // The whole layer: the plan's recipe of both stages with their kernels.
  LoadedProgram layer() const {
    LoadedProgram p{LayerRecipe{&bench->target(), bench->problem(), {plan.stage1, plan.stage2}}, {}};
    p.kernels.of(Role::stage1) = f1;
    p.kernels.of(Role::stage2) = f2;
    return p;
  }
};

// A bench on the emulated target with one plan of the emulator slice loaded.
Result<Bench> open_bench(const Target& t, std::size_t slot, int max_tokens) {
  Bench b;
  b.plan = plans_for(t)[slot];
  const Problem p = small_problem(b.plan.stage1.dtype);
  TargetBench& tb = TargetBench::of(t);
  const EmuLibrary support = FT_TRY(compile_emulated(emit_support(t, p.dtype), t, compile_options()));
  b.bench = FT_TRY(LayerBench::create(tb.device(), p, t, support.binary, max_tokens));
  for (auto [v, f] : {std::pair{&b.plan.stage1, &b.f1}, std::pair{&b.plan.stage2, &b.f2}}) {
    const EmuLibrary lib = FT_TRY(compile_emulated(emit_variant(*v), t, compile_options()));
    *f = FT_TRY(b.bench->load(lib.binary, v->name(), v->lds_bytes()));
  }
  return b;
}

Status inputs(Bench& b, int tokens, std::uint64_t seed, int masked_from = -1) {
  const Problem p = small_problem(b.plan.stage1.dtype);
  Routed r = FT_TRY(make_routing(p, tokens, WorkloadOptions{seed, 1}));
  if (masked_from >= 0)
    for (std::int32_t& id : r.ids)
      if (id >= masked_from) id = -1;
  return b.bench->set_inputs(tokens, seed, r.ids, r.weights);
}

class EmuLayerBench : public ::testing::TestWithParam<std::tuple<const char*, int>> {};

TEST_P(EmuLayerBench, VerifiesAndTimesStagesAndLayers) {
  const Target& t = target(std::get<0>(GetParam()));
  auto b = open_bench(t, std::size_t(std::get<1>(GetParam())), 64);
  ASSERT_TRUE(b) << b.error().describe();
  const std::string label = plan_label(b->plan);
  for (int tokens : {7, 33}) {
    ASSERT_TRUE(inputs(*b, tokens, 11 + std::uint64_t(tokens))) << label;
    for (auto [v, f] : {std::pair{&b->plan.stage1, b->f1}, std::pair{&b->plan.stage2, b->f2}}) {
      auto c = b->bench->verify_stage(*v, f);
      ASSERT_TRUE(c) << v->name() << ": " << c.error().describe();
      EXPECT_TRUE(c->passed) << v->name() << " T=" << tokens << ": " << c->summary();
    }
    auto layer = b->bench->verify_layer(b->layer());
    ASSERT_TRUE(layer) << label << ": " << layer.error().describe();
    EXPECT_TRUE(layer->passed) << label << " T=" << tokens << ": " << layer->summary();
  }
  // Timing: events around the stage; the layer with per-step events and by graph replay.
  TimingOptions quick{.warmup = 1, .reps = 2, .flush_l2 = true, .graph = false};
  auto st = b->bench->time_stage(b->plan.stage2, b->f2, quick);
  ASSERT_TRUE(st) << st.error().describe();
  EXPECT_EQ(st->samples, 2);
  auto lt = b->bench->time_layer(b->layer(), quick);
  ASSERT_TRUE(lt) << lt.error().describe();
  EXPECT_EQ(lt->total.samples, 2);
  ASSERT_TRUE(lt->part("stage1") && lt->part("reduce"));
  EXPECT_EQ(lt->part("stage1")->samples, 2);
  EXPECT_EQ(lt->part("reduce")->samples, 2);
  quick.graph = true;
  auto graph = b->bench->time_layer(b->layer(), quick);
  ASSERT_TRUE(graph) << graph.error().describe();
  EXPECT_EQ(graph->total.samples, 2);
  // The layer still verifies after timing (timing leaves no state behind).
  auto again = b->bench->verify_layer(b->layer());
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->passed) << again->summary();
  // Through the ProgramBench interface the service asks: the layer, a stage
  // alone (a one-stage recipe), and a recipe that is neither refused.
  ProgramBench& pb = *b->bench;
  auto checked = pb.verify(b->layer());
  ASSERT_TRUE(checked) << checked.error().describe();
  EXPECT_TRUE(checked->passed) << checked->summary;
  EXPECT_EQ(checked->rel_l2, again->rel_l2);
  LoadedProgram second = b->layer();
  second.recipe.stages.erase(second.recipe.stages.begin());
  auto alone = pb.verify(second);
  ASSERT_TRUE(alone) << alone.error().describe();
  EXPECT_TRUE(alone->passed) << alone->summary;
  quick.graph = false;
  auto timed = pb.time(second, quick);
  ASSERT_TRUE(timed) << timed.error().describe();
  EXPECT_EQ(timed->total.samples, 2);
  EXPECT_TRUE(timed->parts.empty());
  LoadedProgram twice = b->layer();
  twice.recipe.stages[0] = twice.recipe.stages[1];
  auto refused = pb.verify(twice);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::invalid_input) << refused.error().describe();
}

// Slot 0 (atomic), 1 (split-K) and 3 (partials; persistent and warp-specialised on sm_90a).
INSTANTIATE_TEST_SUITE_P(Targets, EmuLayerBench,
                         ::testing::Combine(::testing::Values("gfx942", "sm_90a"), ::testing::Values(0, 1, 3)),
                         [](const auto& info) { return fmt::format("{}_plan{}", std::get<0>(info.param), std::get<1>(info.param)); });

// A stage of dynamic tile walks timed alone (wgmma_sched=dynamic): every
// repetition starts from cleared tickets, so after one repetition or three
// the stage's ticket counter holds what one run of it takes. (It grew by a
// block's worth per extra repetition when only the first run found cleared
// tickets and the rest timed a stage that computed nothing: the H100 run of
// 2026-12-07 08:22 read 5-30 us for such stages.)
TEST(EmuLayerBenchDynamic, EveryTimedRepetitionOfADynamicStageRunsItsTiles) {
  const Target& t = target("sm_90a");
  const Problem p = small_problem(DType::bf16);
  TargetBench& tb = TargetBench::of(t);
  auto support = compile_emulated(emit_support(t, p.dtype), t, compile_options());
  ASSERT_TRUE(support) << support.error().describe();
  auto bench = LayerBench::create(tb.device(), p, t, support->binary, 64);
  ASSERT_TRUE(bench) << bench.error().describe();
  for (StageRole role : {StageRole::stage1, StageRole::stage2}) {
    const Variant v = persistent_stage(role, DType::bf16, {64, 64, 4, 3, 3}, false).set("dynamic_tiles", 1);
    ASSERT_TRUE(v.contract().tile_tickets) << v.name();
    auto lib = compile_emulated(emit_variant(v), t, compile_options());
    ASSERT_TRUE(lib) << lib.error().describe();
    auto f = (*bench)->load(lib->binary, v.name(), v.lds_bytes());
    ASSERT_TRUE(f) << f.error().describe();
    Routed r = *make_routing(p, 33, WorkloadOptions{7, 1});
    ASSERT_TRUE((*bench)->set_inputs(33, 7, r.ids, r.weights));
    const std::size_t slot = role == StageRole::stage1 ? 0 : 1;
    auto tickets_after = [&](int warmup, int reps) -> std::int32_t {
      auto st = (*bench)->time_stage(v, *f, {.warmup = warmup, .reps = reps, .flush_l2 = false, .graph = false});
      EXPECT_TRUE(st) << st.error().describe();
      std::int32_t taken[2] = {-1, -1};
      EXPECT_TRUE(tb.device().copy_to_host(taken, (*bench)->buffer(Buf::tile_tickets), sizeof taken));
      return taken[slot];
    };
    const std::int32_t once = tickets_after(0, 1);
    EXPECT_GT(once, 0) << v.name();
    EXPECT_LT(once, 1 << 20) << v.name();
    EXPECT_EQ(tickets_after(1, 2), once) << v.name() << ": a repetition started from spent tickets";
  }
}

TEST(EmuLayerBenchRouting, MaskedSlotsVerifyAndBadIdsAreRefused) {
  const Target& t = target("sm_90a");
  auto b = open_bench(t, 3, 64);
  ASSERT_TRUE(b) << b.error().describe();
  ASSERT_TRUE(inputs(*b, 33, 5, /*masked_from=*/2));
  auto layer = b->bench->verify_layer(b->layer());
  ASSERT_TRUE(layer) << layer.error().describe();
  EXPECT_TRUE(layer->passed) << layer->summary();
  // Ids outside [-1, experts): counted by align, so verification refuses the run.
  const Problem p = small_problem(b->plan.stage1.dtype);
  Routed r = *make_routing(p, 9, WorkloadOptions{3, 0});
  r.ids[1] = 4;
  r.ids[2] = -2;
  ASSERT_TRUE(b->bench->set_inputs(9, 3, r.ids, r.weights));
  auto refused = b->bench->verify_layer(b->layer());
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::verify);
  EXPECT_NE(refused.error().message.find("2 routing ids outside [-1, 4)"), std::string::npos) << refused.error().describe();
}

}  // namespace
}  // namespace ft::emu::test
