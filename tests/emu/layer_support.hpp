#pragma once
// Full-layer helpers of the emulator tests: the small problem, the slice of
// each target's variant space, and per-process caches of compiled units,
// workloads and CPU references.
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "generator/atoms.hpp"
#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "templates/ft/moe_inter_scales.hpp"
#include "tests/emu/emu_test_support.hpp"
#include "measure/workload/layer.hpp"
#include "measure/workload/reference.hpp"

namespace ft::emu::test {

inline constexpr int kTokenCounts[] = {1, 7, 33};

// E=4, H=256, I=512, top-2: small enough for the emulator, large enough for
// several tiles in every direction.
inline Problem small_problem(DType dtype, Scales scales = Scales::none) {
  Problem p = emu_problem("emu-small", dtype, 256, 512);
  p.scales = dtype == DType::e4m3 && scales == Scales::none ? Scales::per_tensor : scales;
  return p;
}

// The e4m3 format a target's fp8 atoms read (targets.def's fp8 column).
inline Elem fp8_format_of(const Target& t) { return t.fp8 == Fp8Flavour::fnuz ? Elem::e4m3fnuz : Elem::e4m3; }

// One layer plan per slot, cycling through the target's atoms (bf16 then f16)
// and the axes so every target covers: every atom, both routed-weight
// placements, every reduction (atomic, fp32 and 16-bit partials), single and ping-pong LDS (and 3- and 4-deep
// rings for wgmma, with and without a producer warpgroup), split-K 2, plain and shuffled weights (tiled for the
// producer warpgroup), two warp layouts, two tile_k.
inline std::vector<LayerPlan> plans_for(const Target& t) {
  std::vector<const AtomInfo*> atoms = atoms_for(t, DType::bf16);
  for (const AtomInfo* a : atoms_for(t, DType::f16)) atoms.push_back(a);
  const int count = std::max<int>(8, int(atoms.size()));
  std::vector<LayerPlan> plans;
  for (int i = 0; i < count; ++i) {
    const AtomInfo* atom = atoms[std::size_t(i) % atoms.size()];
    Variant v = Variant::of(t, StageRole::stage1, *atom);
    if (i % 3 == 2) {
      v.set("warps_m", 1);
      v.set("warps_n", 4);
    } else {
      v.set("warps_m", 2);
      v.set("warps_n", 2);
    }
    v.set("tile_m", std::max(32, v.get("warps_m") * atom->m));
    v.set("tile_n", std::max(64, v.get("warps_n") * atom->n));
    v.set("tile_k", std::max(i % 3 == 0 ? 64 : 32, atom->k));
    v.set("stages", i % 2 == 0 ? 2 : 1);
    v.set("weight_in_stage1", (i / 4) % 2 == 1);
    v.set("reduce", int(kReduceModes[std::size_t(i / 2) % kReduceModes.size()]));
    v.set("layout", int((i % 4 == 1 || i % 4 == 2) ? WeightLayout::shuffled : WeightLayout::plain));
    if (atom->warpgroup()) {
      // The wgmma family's own shapes: one to three warpgroups, 64-deep
      // k-tiles, a ring of 3 or 4 buffers; on some slots a producer warpgroup
      // with mbarriers and bulk copies of tiled weights (slots 2, 3) or
      // tensor-map loads of the plain ones (mapped: slots 6, 7), else plain weights.
      v.set("warps_m", i % 4 == 2 ? 12 : i % 2 == 0 ? 4 : 8);
      v.set("warps_n", 1);
      v.set("warp_specialized", i % 4 == 3 || i % 4 == 2);
      v.set("tile_m", 64 * (v.get("warps_m") / 4));
      v.set("tile_n", v.get("warps_m") == 12 ? 32 : 64);
      v.set("tile_k", 64);
      v.set("stages", 3 + i % 2);
      v.set("layout", int(v.get("warp_specialized") == 0 ? WeightLayout::plain : i < 4 ? WeightLayout::tiled : WeightLayout::mapped));
      v.set("tiles_per_block", i % 4 == 3 ? 3 : 1);  // a persistent grid on some: the ring runs across tiles
    }
    LayerPlan plan;
    plan.stage1 = v;
    plan.stage1.role = StageRole::stage1;
    plan.stage1.set("reduce", int(Reduce::atomic));
    plan.stage2 = v;
    plan.stage2.role = StageRole::stage2;
    plan.stage2.set("split_k", Reduce(v.get("reduce")) == Reduce::atomic && i % 4 == 1 ? 2 : 1);
    // Stage 2 reads W2 in the other layout on odd slots, so the layouts mix within a layer too.
    if (i % 2 == 1 && !atom->warpgroup())
      plan.stage2.set("layout", int(WeightLayout(v.get("layout")) == WeightLayout::plain ? WeightLayout::shuffled : WeightLayout::plain));
    plans.push_back(plan);
  }
  return plans;
}

inline std::string plan_label(const LayerPlan& p) { return p.stage1.name() + " + " + p.stage2.name(); }

// Compiled units and loaded modules of one emulated target, per process.
class TargetBench {
 public:
  static TargetBench& of(const Target& t) {
    static std::map<std::string, std::unique_ptr<TargetBench>> benches;
    auto& b = benches[std::string(t.name)];
    if (!b) b.reset(new TargetBench(t));
    return *b;
  }

  EmuDevice& device() { return *device_; }

  Result<FunctionHandle> entry(const KernelSource& unit, const std::string& name) {
    auto it = modules_.find(unit.name);
    if (it == modules_.end()) {
      auto lib = FT_TRY(compile_emulated(unit, target_, compile_options()));
      const ModuleHandle m = FT_TRY(device_->load_library(lib));
      it = modules_.emplace(unit.name, m).first;
    }
    return device_->function(it->second, name);
  }

  Result<RoleKernels> kernels(const LayerPlan& plan) {
    const KernelSource support = emit_support(target_, plan.stage1.dtype);
    RoleKernels k;
    k.of(Role::align) = FT_TRY(entry(support, align_entry(target_)));
    k.of(Role::align_count) = FT_TRY(entry(support, align_count_entry(target_)));
    k.of(Role::align_scatter) = FT_TRY(entry(support, align_scatter_entry(target_)));
    k.of(Role::reduce_atomic) = FT_TRY(entry(support, reduce_entry(target_, Reduce::atomic, plan.stage2.dtype)));
    k.of(Role::reduce_partials) = FT_TRY(entry(support, reduce_entry(target_, Reduce::partials, plan.stage2.dtype)));
    k.of(Role::reduce_partials16) = FT_TRY(entry(support, reduce_entry(target_, Reduce::partials16, plan.stage2.dtype)));
    if (plan.stage1.dtype == DType::e4m3) {
      k.of(Role::quantise_x) = FT_TRY(entry(support, quantise_x_entry(target_)));
      k.of(Role::quantise_inter) = FT_TRY(entry(support, quantise_inter_entry(target_)));
    }
    k.of(Role::stage1) = FT_TRY(entry(emit_variant(plan.stage1), plan.stage1.name()));
    k.of(Role::stage2) = FT_TRY(entry(emit_variant(plan.stage2), plan.stage2.name()));
    return k;
  }

 private:
  explicit TargetBench(const Target& t) : target_(t) {
    auto d = EmuDevice::create(t);
    EXPECT_TRUE(d) << (d ? "" : d.error().describe());
    if (d) device_ = std::move(*d);
  }
  const Target& target_;
  std::unique_ptr<EmuDevice> device_;
  std::map<std::string, ModuleHandle> modules_;
};

// A stage of sm_90a's wgmma family in persistent producer blocks (pingpong_test,
// dynamic_tiles_test set their axis on it): bf16, or fp8 per-tensor with fast
// accumulation and stage 2 on row scales; tiled weights.
struct PersistentStage {
  int tile_m, tile_n, warps_m, stages, tiles;
  Reduce reduce = Reduce::atomic;
  int split_k = 1;
};
inline Variant persistent_stage(StageRole role, DType dtype, const PersistentStage& s, bool weight_in_stage1) {
  const bool fp8 = dtype == DType::e4m3;
  Variant v = Variant::of(target("sm_90a"), role, *find_atom(fp8 ? "wgmma_m64k32_f32_e4m3" : "wgmma_m64k16_f32_bf16"));
  v.set("tile_m", s.tile_m).set("tile_n", s.tile_n).set("tile_k", fp8 ? 128 : 64);
  v.set("warps_m", s.warps_m).set("warps_n", 1).set("stages", s.stages);
  v.set("warp_specialized", 1).set("tiles_per_block", s.tiles);
  v.set("layout", int(WeightLayout::tiled)).set("weight_in_stage1", weight_in_stage1);
  if (role == StageRole::stage2) v.set("reduce", int(s.reduce)).set("split_k", s.split_k);
  if (fp8) {
    v.set("scales", int(Scales::per_tensor)).set("promote", 0);
    if (role == StageRole::stage2) v.set("inter_scales", int(InterScales::row));
  }
  return v;
}

// Workloads (one expert with no tokens) and their references, per process.
struct Case {
  Workload workload;
  ReferenceOutput reference[2];  // [weight in stage 2, weight in stage 1]
  ReferenceOutput bf16_layer[2];  // fp8 problems: the bf16 layer on the dequantised weights (the sanity reference)
  ReferenceOutput row_scales[2];  // fp8 problems: the intermediate quantised per row (a stage 2 reading row scales)
};

inline const Case& case_for(DType dtype, int tokens, std::uint64_t seed = 5, Scales scales = Scales::none,
                            Elem fp8_format = Elem::e4m3) {
  static std::map<std::tuple<DType, int, std::uint64_t, Scales, Elem>, std::unique_ptr<Case>> cases;
  auto& c = cases[{dtype, tokens, seed, scales, fp8_format}];
  if (!c) {
    c = std::make_unique<Case>();
    auto w = make_workload(small_problem(dtype, scales), tokens, WorkloadOptions{seed, 1, fp8_format});
    EXPECT_TRUE(w) << (w ? "" : w.error().describe());
    c->workload = std::move(*w);
    c->reference[0] = reference_layer(c->workload, {.weight_in_stage1 = false});
    c->reference[1] = reference_layer(c->workload, {.weight_in_stage1 = true});
    if (dtype == DType::e4m3)
      for (int f = 0; f < 2; ++f) {
        c->bf16_layer[f] = reference_layer(c->workload, {.weight_in_stage1 = f == 1, .quantise_activations = false});
        c->row_scales[f] = reference_layer(c->workload, {.weight_in_stage1 = f == 1, .inter_row_scales = true});
      }
  }
  return *c;
}

// The layer `plan` on the small problem at every kTokenCounts T, each against
// `reference(case)` (a ReferenceOutput of the Case), with the bounds of its dtype.
template <class Reference>
void expect_plan_matches(TargetBench& bench, const LayerPlan& plan, Reference reference) {
  const DType dtype = plan.stage1.dtype;
  auto kernels = bench.kernels(plan);
  ASSERT_TRUE(kernels) << kernels.error().describe();
  for (int tokens : kTokenCounts) {
    const Case& c = case_for(dtype, tokens);
    auto dw = DeviceWorkload::upload(bench.device(), c.workload);
    ASSERT_TRUE(dw) << dw.error().describe();
    auto run = run_layer(*dw, *kernels, plan);
    ASSERT_TRUE(run) << plan_label(plan) << " T=" << tokens << ": " << run.error().describe();
    const Comparison y = compare_output(run->y, reference(c).y, dtype);
    EXPECT_TRUE(y.passed) << plan_label(plan) << " T=" << tokens << ": " << y.summary();
  }
}

// The stage's generated unit with `code` inserted before its Kernel alias, at
// namespace scope (a mutant's specialisation for the unit's Config); its name
// gets `suffix`.
inline KernelSource with_code_before_kernel(const Variant& v, const std::string& code, const std::string& suffix) {
  KernelSource unit = emit_variant(v);
  const std::size_t at = unit.text.find("\nusing Kernel = ");
  EXPECT_NE(at, std::string::npos) << "the generated unit has no Kernel alias";
  if (at == std::string::npos) return unit;
  unit.text.insert(at + 1, "}  // namespace\n" + code + "namespace {\n");
  unit.name += suffix;
  return unit;
}

}  // namespace ft::emu::test
