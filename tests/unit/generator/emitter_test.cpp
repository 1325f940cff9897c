// Golden files pin the generated instantiation units: a change to the emitter
// shows up as a diff in tests/golden/. Refresh with FLYTUNE_UPDATE_GOLDEN=1.
#include "generator/emitter.hpp"

#include <gtest/gtest.h>

#include "generator/space.hpp"
#include "tests/unit/generator/golden.hpp"

namespace ft {
namespace {

using test::check_golden;

Variant make(const char* target, StageRole kind, const char* atom, int tm, int tn, int tk, int wm, int wn, int st) {
  Variant v = Variant::of(*find_target(target), kind, *find_atom(atom));
  v.set("tile_m", tm);
  v.set("tile_n", tn);
  v.set("tile_k", tk);
  v.set("warps_m", wm);
  v.set("warps_n", wn);
  v.set("stages", st);
  return v;
}

TEST(EmitterGolden, Gfx942Stage1) {
  check_golden(emit_variant(make("gfx942", StageRole::stage1, "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2)));
}

TEST(EmitterGolden, Gfx950Stage2SplitKShuffled) {
  Variant v = make("gfx950", StageRole::stage2, "mfma_f32_32x32x16_bf16", 64, 128, 64, 2, 2, 1);
  v.set("split_k", 2);
  v.set("layout", int(WeightLayout::shuffled));
  check_golden(emit_variant(v));
}

TEST(EmitterGolden, Sm90aStage1RoutedWeight) {
  Variant v = make("sm_90a", StageRole::stage1, "mma_m16n8k16_f32_bf16", 32, 64, 32, 2, 2, 2);
  v.set("weight_in_stage1", true);
  check_golden(emit_variant(v));
}

TEST(EmitterGolden, Sm90aStage2Partials) {
  Variant v = make("sm_90a", StageRole::stage2, "mma_m16n8k16_f32_bf16", 64, 64, 64, 1, 4, 2);
  v.set("reduce", int(Reduce::partials));
  check_golden(emit_variant(v));
}

TEST(EmitterGolden, Sm90aWgmmaStage1TwoWarpgroups) {
  check_golden(emit_variant(make("sm_90a", StageRole::stage1, "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 4)));
}

TEST(EmitterGolden, Sm90aWgmmaStage2WarpSpecialized) {
  Variant v = make("sm_90a", StageRole::stage2, "wgmma_m64k16_f32_bf16", 128, 256, 64, 8, 1, 4);
  v.set("warp_specialized", true);
  v.set("layout", int(WeightLayout::tiled));  // the producer warpgroup's bulk copies read tiled weights
  check_golden(emit_variant(v));
}

TEST(EmitterGolden, Sm90aWgmmaStage1Persistent) {
  Variant v = make("sm_90a", StageRole::stage1, "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 4);
  v.set("warp_specialized", true);
  v.set("layout", int(WeightLayout::tiled));
  v.set("tiles_per_block", 8);
  check_golden(emit_variant(v));
}

// The weights through a tensor map: the kernel takes ft::MappedMoeArgs in place.
TEST(EmitterGolden, Sm90aWgmmaStage1MappedWeights) {
  Variant v = make("sm_90a", StageRole::stage1, "wgmma_m64k16_f32_bf16", 128, 128, 64, 8, 1, 4);
  v.set("warp_specialized", true);
  v.set("layout", int(WeightLayout::mapped));
  v.set("tiles_per_block", 8);
  check_golden(emit_variant(v));
}

TEST(EmitterGolden, Gfx90aSupport) { check_golden(emit_support(*find_target("gfx90a"), DType::bf16)); }

TEST(Emitter, EntryPointIsTheVariantName) {
  Variant v = make("gfx942", StageRole::stage2, "mfma_f32_32x32x8_bf16", 64, 64, 32, 2, 2, 2);
  KernelSource s = emit_variant(v);
  EXPECT_EQ(s.entry_points, std::vector<std::string>{v.name()});
  EXPECT_NE(s.text.find("FT_KERNEL(256, " + v.name() + ")"), std::string::npos);
  EXPECT_NE(s.text.find("static_assert(Kernel::kSmemBytes == " + std::to_string(v.lds_bytes())), std::string::npos);
}

TEST(Atoms, EveryTargetHasAtomsForBothDtypes) {
  for (const Target& t : all_targets())
    for (DType d : {DType::bf16, DType::f16}) EXPECT_FALSE(atoms_for(t, d).empty()) << t.name << " " << to_string(d);
  EXPECT_EQ(atoms_for(*find_target("gfx950"), DType::bf16).size(), 4u);
  EXPECT_EQ(atoms_for(*find_target("gfx942"), DType::bf16).size(), 2u);
  EXPECT_EQ(find_atom("mfma_f32_32x32x8_bf16")->c_regs(), 16);
  EXPECT_EQ(find_atom("mma_m16n8k16_f32_bf16")->a_regs(), 8);
  EXPECT_EQ(find_atom("mfma_f32_16x16x16_bf16")->mnemonic_on(*find_target("gfx90a")), "v_mfma_f32_16x16x16bf16_1k");
}

}  // namespace
}  // namespace ft
