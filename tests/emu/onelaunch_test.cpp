// The one-launch layer (templates/ft/moe_onelaunch.hpp) launched directly on
// the emulator, for sm_90a (mma.sync m16n8k16 bf16) and gfx942 (mfma
// 16x16x16 bf16), from tests/emu/units/onelaunch.cpp: the whole layer, stage
// 1 alone and stage 2 alone against the CPU reference at T = 1, 3, 7, 16
// (uniform routing, one expert with no tokens); -1 ids with fully masked
// tokens (zero Y rows) and bad ids (counted); Y the same bits on every run and
// under another interleaving of the blocks; a mutant that starts stage-2
// tiles one stage-1 tile early, which must fail; and the family's emitted
// units through the layer program.
#include <gtest/gtest.h>

#include <algorithm>

#include "device/device_buffer.hpp"
#include "generator/families/families.hpp"
#include "measure/workload/half.hpp"
#include "tests/emu/layer_support.hpp"

namespace ft::emu::test {
namespace {

// The unit's Config (tile_m 16, tile_n 16, tile_k 64, 2 LDS stages, 64
// threads); its GEMMs' LDS, the tiled family's formula: stages x (tile_m +
// 2 tile_n) rows x (tile_k + 8) bf16 values.
constexpr int kTileM = 16, kThreads = 64;
constexpr int kGemmLds = 2 * (16 + 2 * 16) * (64 + 8) * 2;
constexpr unsigned long long kMutantSchedules = 8;

enum class Form { layer, stage1, stage2 };
const char* form_name(Form f) { return f == Form::layer ? "layer" : f == Form::stage1 ? "stage1" : "stage2"; }

struct Out {
  std::vector<std::uint16_t> y, inter;
  int bad_ids = -1;
};

// One emulated device with the unit loaded: in turn on the machine's cores,
// or `interleave` blocks on one thread in the schedule of `seed`.
Loaded& device_for(const Target& t, int interleave = 0, unsigned long long seed = 0) {
  static std::map<std::tuple<std::string, int, unsigned long long>, std::unique_ptr<Loaded>> devices;
  auto& d = devices[{std::string(t.name), interleave, seed}];
  if (!d) {
    EmuDeviceOptions o;
    if (interleave) o.workers = 1, o.interleave = interleave, o.schedule_seed = seed;
    auto l = load(t, unit_from_file("onelaunch.cpp", {"ft_onelaunch_moe1", "ft_onelaunch_moe2", "ft_onelaunch_early_moe2"}), o);
    EXPECT_TRUE(l) << (l ? "" : l.error().describe());
    d = std::make_unique<Loaded>(std::move(*l));
  }
  return *d;
}

// Clears y_acc's head, poisons what the kernel writes (NaN), launches `entry`
// over `blocks` blocks and reads Y, the intermediate and the bad-id count back.
// Stage 2 alone reads `inter` (the reference's).
Result<Out> launch(Loaded& l, const Workload& w, const char* entry, Form form, int blocks,
                   const std::vector<std::uint16_t>* inter = nullptr) {
  Device& d = *l.device;
  const Problem& p = w.problem;
  const long long T = w.tokens, H = p.hidden, I = p.inter, k = p.topk;
  const long long rows = max_padded_rows(p, w.tokens, kTileM);
  const long long head = onelaunch_head_words(T, H, rows / kTileM);
  DeviceWorkload dw = FT_TRY(DeviceWorkload::upload(d, w));
  DeviceBuffer y_acc = FT_TRY(DeviceBuffer::allocate(d, std::size_t(head + T * k * H) * 4));
  FT_CHECK(d.memset_u32(y_acc.ptr(), 0, std::size_t(head)));
  FT_CHECK(d.memset_u32(y_acc.ptr() + std::size_t(head) * 4, 0xffffffffu, std::size_t(T * k * H)));
  FT_CHECK(d.memset_u32(dw.y.ptr(), 0xffffffffu, std::size_t(T * H / 2)));
  FT_CHECK(d.memset_u32(dw.bad_ids.ptr(), 0xffffffffu, 1));
  if (inter) FT_CHECK(d.copy_to_device(dw.inter.ptr(), inter->data(), inter->size() * 2));
  else FT_CHECK(d.memset_u32(dw.inter.ptr(), 0xffffffffu, std::size_t(T * k * I / 2)));
  const BufferTable& b = dw.table();
  MoeArgs a{};
  a.x = device_pointer<const u16>(at(b, Buf::x));
  a.topk_ids = device_pointer<const i32>(at(b, Buf::topk_ids));
  a.topk_weights = device_pointer<const float>(at(b, Buf::topk_weights));
  a.w1 = device_pointer<const u16>(at(b, Buf::w1));
  a.w2 = device_pointer<const u16>(at(b, Buf::w2));
  a.inter = device_pointer<u16>(at(b, Buf::inter));
  a.y_acc = device_pointer<float>(y_acc.ptr());
  a.y = form == Form::stage1 ? nullptr : device_pointer<u16>(at(b, Buf::y));
  a.bad_ids = device_pointer<i32>(at(b, Buf::bad_ids));
  a.tokens = int(T);
  a.hidden = int(H);
  a.inter_size = int(I);
  a.experts = p.experts;
  a.topk = int(k);
  a.align_block = kTileM;
  a.max_padded_rows = int(rows);
  a.flags = form == Form::layer ? kFlagOneLaunchLayer : 0;
  const int lds = kGemmLds + int(onelaunch_route_bytes(rows, kTileM, p.experts));
  const FunctionHandle fn = l.fn(entry);
  FT_CHECK(d.set_dynamic_shared(fn, lds));
  FT_CHECK(d.launch(fn, Dim3{unsigned(blocks), 1, 1}, Dim3{unsigned(kThreads), 1, 1}, lds, {}, &a, sizeof a));
  Out out;
  out.y.resize(std::size_t(T * H));
  out.inter.resize(std::size_t(T * k * I));
  FT_CHECK(d.copy_to_host(out.y.data(), dw.y.ptr(), out.y.size() * 2));
  FT_CHECK(d.copy_to_host(out.inter.data(), dw.inter.ptr(), out.inter.size() * 2));
  FT_CHECK(d.copy_to_host(&out.bad_ids, dw.bad_ids.ptr(), 4));
  FT_CHECK(d.synchronize());
  return out;
}

// Stage 1's rows of the routed pairs against the reference's.
Comparison compare_inter(const Workload& w, const Out& out, const ReferenceOutput& ref) {
  const std::size_t I = std::size_t(w.problem.inter);
  std::vector<std::uint16_t> got;
  std::vector<float> want;
  for (std::size_t pair = 0; pair < w.topk_ids.size(); ++pair) {
    const int e = w.topk_ids[pair];
    if (e < 0 || e >= w.problem.experts) continue;
    got.insert(got.end(), out.inter.begin() + long(pair * I), out.inter.begin() + long((pair + 1) * I));
    for (std::size_t i = 0; i < I; ++i) want.push_back(bf16_bits_to_f32(ref.inter[pair * I + i]));
  }
  return compare_output(got, want, DType::bf16);
}

// Runs a form and checks it against the reference: Y (layer, stage 2) or the intermediate (stage 1).
void expect_form_matches(const Target& t, const Workload& w, const ReferenceOutput& ref, Form form, const std::string& what) {
  const char* entry = form == Form::stage1 ? "ft_onelaunch_moe1" : "ft_onelaunch_moe2";
  auto out = launch(device_for(t), w, entry, form, 8, form == Form::stage2 ? &ref.inter : nullptr);
  ASSERT_TRUE(out) << what << ": " << out.error().describe();
  const Comparison c = form == Form::stage1 ? compare_inter(w, *out, ref) : compare_output(out->y, ref.y, DType::bf16);
  EXPECT_TRUE(c.passed) << what << " " << form_name(form) << ": " << c.summary(std::size_t(w.problem.hidden));
}

using Param = std::tuple<const char*, int>;  // target, T
class EmuOneLaunch : public ::testing::TestWithParam<Param> {};

TEST_P(EmuOneLaunch, EveryFormMatchesTheCpuReference) {
  const Target& t = target(std::get<0>(GetParam()));
  const int tokens = std::get<1>(GetParam());
  const Case& c = case_for(DType::bf16, tokens);  // uniform routing, the last expert empty
  const std::string what = fmt::format("{} T={}", t.name, tokens);
  for (Form f : {Form::layer, Form::stage1, Form::stage2}) expect_form_matches(t, c.workload, c.reference[0], f, what);
}

// Y the same bits on two runs and under an interleaving of four blocks on one thread.
TEST_P(EmuOneLaunch, YIsTheSameBitsOnEveryRun) {
  const Target& t = target(std::get<0>(GetParam()));
  const Workload& w = case_for(DType::bf16, std::get<1>(GetParam())).workload;
  auto first = launch(device_for(t), w, "ft_onelaunch_moe2", Form::layer, 8);
  auto second = launch(device_for(t), w, "ft_onelaunch_moe2", Form::layer, 8);
  auto interleaved = launch(device_for(t, 4, 7), w, "ft_onelaunch_moe2", Form::layer, 8);
  ASSERT_TRUE(first && second && interleaved);
  EXPECT_TRUE(first->y == second->y) << t.name << ": two runs differ";
  EXPECT_TRUE(first->y == interleaved->y) << t.name << ": the interleaved run differs";
}

INSTANTIATE_TEST_SUITE_P(Targets, EmuOneLaunch, ::testing::Combine(::testing::Values("sm_90a", "gfx942"), ::testing::Values(1, 3, 7, 16)),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return fmt::format("{}_T{}", std::get<0>(info.param), std::get<1>(info.param));
                         });

// Expert parallelism: slots of other ranks' experts are -1 (token 2 has no
// routed slot: its Y row must be zeros, not the poison); then three bad ids,
// which the kernel counts and never uses.
TEST(EmuOneLaunchRouting, MaskedSlotsAndBadIds) {
  for (const char* name : {"sm_90a", "gfx942"}) {
    const Target& t = target(name);
    Workload w = case_for(DType::bf16, 7).workload;
    const int k = w.problem.topk;
    for (std::int32_t& id : w.topk_ids)
      if (id >= 2) id = -1;  // this rank owns experts 0 and 1
    for (int s = 0; s < k; ++s) w.topk_ids[std::size_t(2 * k + s)] = -1;
    const ReferenceOutput ref = reference_layer(w);
    for (Form f : {Form::layer, Form::stage1, Form::stage2}) expect_form_matches(t, w, ref, f, std::string(name) + " masked");
    auto out = launch(device_for(t), w, "ft_onelaunch_moe2", Form::layer, 8);
    ASSERT_TRUE(out) << out.error().describe();
    const std::size_t H = std::size_t(w.problem.hidden);
    EXPECT_TRUE(std::all_of(out->y.begin() + long(2 * H), out->y.begin() + long(3 * H), [](std::uint16_t v) { return v == 0; }))
        << name << ": token 2 has no routed slot, its Y row is not zeros";
    EXPECT_EQ(out->bad_ids, 0) << name;

    w.topk_ids[1] = 7;  // beyond the 4 experts
    w.topk_ids[6] = -3;
    w.topk_ids[9] = 1 << 30;
    const ReferenceOutput bad_ref = reference_layer(w);  // bad ids contribute nothing, as -1
    auto bad = launch(device_for(t), w, "ft_onelaunch_moe2", Form::layer, 8);
    ASSERT_TRUE(bad) << bad.error().describe();
    EXPECT_EQ(bad->bad_ids, 3) << name;
    const Comparison c = compare_output(bad->y, bad_ref.y, DType::bf16);
    EXPECT_TRUE(c.passed) << name << " with bad ids: " << c.summary(H);
  }
}

// The release rule is what orders stage 2 after stage 1: the control passes
// under every schedule; the mutant, whose stage-2 tiles start when one
// stage-1 tile of their row block is still missing, reads poisoned
// intermediate rows under some. The layer: one routed pair (one row block),
// I = 64 (four stage-1 tiles, and stage 2 reads all of them in its first
// k-slice), four blocks interleaved on one thread; the schedules are seeded,
// the same on every run, and so is the outcome.
TEST(EmuOneLaunchRelease, AnEarlyReleaseFails) {
  Problem p = small_problem(DType::bf16);
  p.inter = 64;
  auto made = make_workload(p, 1);
  ASSERT_TRUE(made) << made.error().describe();
  Workload w = std::move(*made);
  w.topk_ids[1] = -1;
  const ReferenceOutput ref = reference_layer(w);
  for (const char* name : {"sm_90a", "gfx942"}) {
    const Target& t = target(name);
    int failed = 0;
    for (unsigned long long seed = 1; seed <= kMutantSchedules; ++seed) {
      Loaded& l = device_for(t, 4, seed);
      auto good = launch(l, w, "ft_onelaunch_moe2", Form::layer, 4);
      ASSERT_TRUE(good) << good.error().describe();
      const Comparison g = compare_output(good->y, ref.y, DType::bf16);
      EXPECT_TRUE(g.passed) << name << " seed " << seed << ": " << g.summary();
      auto bad = launch(l, w, "ft_onelaunch_early_moe2", Form::layer, 4);
      ASSERT_TRUE(bad) << bad.error().describe();
      failed += compare_output(bad->y, ref.y, DType::bf16).passed ? 0 : 1;
    }
    std::printf("%s: the early release failed under %d of %d schedules\n", name, failed, int(kMutantSchedules));
    EXPECT_GT(failed, 0) << name << ": a stage 2 released one stage-1 tile early passed under every schedule";
  }
}

// The family's own units (generator/families/onelaunch.cpp, emitted) through
// the layer program -- a clear and one launch -- as the search and the
// runtime run them: every form against the CPU reference.
TEST(EmuOneLaunchProgram, TheFamilysUnitsThroughTheLayerProgram) {
  const std::tuple<const char*, const char*, int, int> cases[] = {{"gfx942", "mfma_f32_16x16x16_bf16", 1, 16},
                                                                  {"sm_90a", "mma_m16n8k16_f32_bf16", 1, 8}};
  for (const auto& [name, atom, warps_n, tile_n] : cases) {
    const Target& t = target(name);
    LayerPlan plan;
    for (StageRole role : kStageRoles) {
      Variant v = Variant::of(t, role, *find_atom(atom), &onelaunch_family());
      v.set("ol_blocks", 6).set("tile_m", 16).set("tile_n", tile_n).set("tile_k", 64).set("warps_m", 1).set("warps_n", warps_n);
      const auto why = why_illegal(v, small_problem(DType::bf16));
      ASSERT_FALSE(why) << v.name() << ": " << *why;
      (role == StageRole::stage1 ? plan.stage1 : plan.stage2) = v;
    }
    auto kernels = TargetBench::of(t).kernels(plan);
    ASSERT_TRUE(kernels) << kernels.error().describe();
    for (int tokens : kTokenCounts) {
      const Case& c = case_for(DType::bf16, tokens);
      auto prog = build_program(plan.recipe(c.workload.problem), tokens);
      ASSERT_TRUE(prog) << prog.error().describe();
      EXPECT_EQ(prog->steps.size(), 2u) << plan_label(plan);
      auto dw = DeviceWorkload::upload(TargetBench::of(t).device(), c.workload);
      ASSERT_TRUE(dw) << dw.error().describe();
      auto cmp = verify_layer(*dw, *kernels, plan, c.reference[0]);
      ASSERT_TRUE(cmp) << plan_label(plan) << " T=" << tokens << ": " << cmp.error().describe();
      EXPECT_TRUE(cmp->passed) << plan_label(plan) << " T=" << tokens << ": " << cmp->summary(std::size_t(c.workload.problem.hidden));
    }
  }
}

}  // namespace
}  // namespace ft::emu::test
