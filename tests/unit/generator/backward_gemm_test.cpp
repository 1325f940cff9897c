// The backward's K-grouped GEMM family (generator/backward_gemm.hpp): each row of
// its rule table rejects what it should with its line, every configuration of
// every 16-bit target's space passes the table, the launch covers C, and one
// emitted unit is pinned as a golden file (refresh with FLYTUNE_UPDATE_GOLDEN=1).
#include "generator/backward_gemm.hpp"

#include <gtest/gtest.h>

#include <set>

#include "tests/unit/generator/golden.hpp"

namespace ft {
namespace {

BackwardVariant make(const char* target, const char* atom, int tm, int tn, int tk, int wm, int wn, int st) {
  return BackwardVariant{find_target(target), find_atom(atom), tm, tn, tk, wm, wn, st};
}

// E = 8, H = 64, I = 96, top-2: I is no multiple of 64.
Problem problem_64x96() {
  Problem p;
  p.experts = 8;
  p.hidden = 64;
  p.inter = 96;
  p.topk = 2;
  return p;
}

struct Rejection {
  BackwardVariant v;
  const char* why;  // a part of the reason
};

TEST(KGroupedRules, EachRuleRejectsWithItsLine) {
  const Rejection cases[] = {
      {make("gfx942", "mma_m16n8k16_f32_bf16", 64, 64, 32, 2, 2, 2), "does not exist on gfx942"},
      {make("sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 32, 2, 2, 3), "stacks whole warpgroups"},
      {make("sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 32, 8, 1, 3), "tile_m 64 is not whole 64-row blocks for each of 2"},
      {make("sm_90a", "wgmma_m64k16_f32_bf16", 64, 96, 32, 4, 1, 3), "tile_n 96 is not 64, 128 or 256"},
      {make("sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 24, 4, 1, 3), "tile_k 24 is not a multiple of the atom's K 16"},
      {make("sm_90a", "wgmma_m64k16_f32_bf16", 64, 64, 32, 4, 1, 2), "stages 2 is not 3 to 8"},
      {make("gfx942", "mfma_f32_16x16x32_e4m3fnuz", 64, 64, 32, 2, 2, 2), "not 16-bit"},
      {make("gfx942", "mfma_f32_16x16x16_bf16", 48, 64, 32, 2, 2, 2), "tile_m 48 is not a multiple"},
      {make("gfx942", "mfma_f32_16x16x16_bf16", 64, 24, 32, 2, 2, 2), "tile_n 24 is not a multiple"},
      {make("sm_90a", "mma_m16n8k16_f32_bf16", 64, 64, 24, 2, 2, 2), "tile_k 24 is not a multiple of atom K 16"},
      {make("gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 3), "stages 3"},
      {make("gfx942", "mfma_f32_16x16x16_bf16", 256, 256, 32, 4, 8, 2), "threads per block exceed"},
      {make("gfx942", "mfma_f32_16x16x16_bf16", 256, 256, 128, 4, 4, 2), "LDS use"},
      {make("gfx942", "mfma_f32_16x16x16_bf16", 0, 64, 32, 2, 2, 2), "must be positive"},
  };
  for (const Rejection& c : cases) {
    ASSERT_NE(c.v.atom, nullptr) << c.why;
    const auto why = why_illegal(c.v);
    ASSERT_TRUE(why) << c.why;
    EXPECT_NE(why->find(c.why), std::string::npos) << *why;
  }
  EXPECT_FALSE(why_illegal(make("gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2)));
  EXPECT_FALSE(why_illegal(make("sm_90a", "mma_m16n8k16_f32_f16", 64, 64, 32, 2, 2, 1)));
  BackwardVariant w = make("sm_90a", "wgmma_m64k16_f32_bf16", 128, 256, 64, 8, 1, 4);
  EXPECT_FALSE(why_illegal(w));
  EXPECT_EQ(w.name(), "ft_sm_90a_kgrouped_bf16_m128n256k64_w8x1_wgmma_s4");
  EXPECT_EQ(w.lds_bytes(), 4 * (128 + 256) * 64 * 2 + 1024);
  // A shallow ring: the epilogue's staged fp32 C tile (rows of 256 + 8 floats) sets the window.
  EXPECT_EQ(make("sm_90a", "wgmma_m64k16_f32_bf16", 128, 256, 16, 8, 1, 3).lds_bytes(), 128 * (256 + 8) * 4);
  w.op = BackwardOp::dgrad_scatter;  // the dgrad's wgmma form: a K-major A 64 deep
  EXPECT_FALSE(why_illegal(w));
  EXPECT_EQ(w.name(), "ft_sm_90a_dgrad1_bf16_m128n256k64_w8x1_wgmma_s4");
  w.tile_k = 32;
  ASSERT_TRUE(why_illegal(w));
  EXPECT_NE(why_illegal(w)->find("tile_k 32 is not 64"), std::string::npos) << *why_illegal(w);
  w.op = BackwardOp::wgrad;
  EXPECT_FALSE(why_illegal(w));
}

// Each of sm_90a's backward spaces lists the portable form's first
// configuration (a search's base program), then every wgmma configuration (a
// search's --budget N takes a role's first N), then the rest.
TEST(KGroupedSpace, Sm90aListsThePortableBaseThenTheWgmmaForm) {
  const Target& t = *find_target("sm_90a");
  for (BackwardOp op : {BackwardOp::wgrad, BackwardOp::dgrad_swiglu, BackwardOp::dgrad_scatter})
    for (Preset preset : {Preset::small, Preset::default_, Preset::wide}) {
      const auto space = backward_space(t, DType::bf16, preset, op);
      ASSERT_GT(space.size(), 1u);
      EXPECT_FALSE(space[0].atom->warpgroup()) << space[0].name();
      EXPECT_TRUE(space[1].atom->warpgroup()) << space[1].name();
      std::size_t wgmma = 0;
      for (std::size_t i = 1; i < space.size() && space[i].atom->warpgroup(); ++i) wgmma = i;
      for (std::size_t i = wgmma + 1; i < space.size(); ++i) EXPECT_FALSE(space[i].atom->warpgroup()) << space[i].name();
      if (preset == Preset::default_) {
        EXPECT_GE(wgmma, 4u) << to_string(op);
      }
      for (std::size_t i = 1; i <= wgmma && op != BackwardOp::wgrad; ++i) EXPECT_EQ(space[i].tile_k, 64) << space[i].name();
    }
  EXPECT_EQ(backward_space(t, DType::bf16, Preset::default_, BackwardOp::wgrad)[0].name(),
            "ft_sm_90a_kgrouped_bf16_m64n64k32_w2x2_mma16x8x16_s2");
}

TEST(KGroupedSpace, EveryTargetHasLegalDistinctConfigurations) {
  for (const char* t : {"gfx90a", "gfx942", "gfx950", "sm_90a"})
    for (DType d : {DType::bf16, DType::f16})
      for (Preset preset : {Preset::small, Preset::default_, Preset::wide}) {
        const auto space = backward_space(*find_target(t), d, preset);
        EXPECT_FALSE(space.empty()) << t;
        std::set<std::string> names;
        for (const BackwardVariant& v : space) {
          EXPECT_FALSE(why_illegal(v)) << v.name();
          EXPECT_EQ(v.atom->dtype, d);
          EXPECT_TRUE(names.insert(v.name()).second) << v.name();
        }
      }
}

TEST(KGroupedLaunch, OneBlockPerTileOfEachExpert) {
  const BackwardVariant v = make("gfx942", "mfma_f32_32x32x8_bf16", 64, 128, 32, 2, 2, 2);
  const LaunchShape s = kgrouped_launch(v, 8, 256, 512);
  EXPECT_EQ(s.grid_x, 4);
  EXPECT_EQ(s.grid_y, 4);
  EXPECT_EQ(s.grid_z, 8);
  EXPECT_EQ(s.block, 256);
  EXPECT_EQ(s.lds_bytes, 2 * (64 + 128) * (32 + 8) * 2);
}

using test::check_golden;

TEST(DgradRules, TheReductionIsTiledByTileK) {
  Problem p = problem_64x96();
  BackwardVariant v = make("sm_90a", "mma_m16n8k16_f32_bf16", 16, 32, 128, 1, 2, 2);
  v.op = BackwardOp::dgrad_swiglu;
  auto why = why_illegal_for(v, p);
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("tile_k 128 does not divide the reduction K = 64"), std::string::npos) << *why;
  v.tile_k = 32;
  EXPECT_FALSE(why_illegal_for(v, p));  // K = H = 64, n = I = 96
  v.op = BackwardOp::dgrad_scatter;     // K = 2I = 192, n = H = 64
  EXPECT_FALSE(why_illegal_for(v, p));
  v.tile_n = 128;
  EXPECT_TRUE(why_illegal_for(v, p));
  EXPECT_EQ(make("gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2).name(),
            "ft_gfx942_kgrouped_bf16_m64n64k32_w2x2_mfma16x16x16_s2");
  v.tile_n = 32;
  EXPECT_EQ(v.name(), "ft_sm_90a_dgrad1_bf16_m16n32k32_w1x2_mma16x8x16_s2");
  const LaunchShape s = dgrad_launch(v, 96, 64);
  EXPECT_EQ(s.grid_x, 6);
  EXPECT_EQ(s.grid_y, 2);
  EXPECT_EQ(s.grid_z, 1);
  EXPECT_EQ(s.block, 64);
  for (BackwardOp op : {BackwardOp::dgrad_swiglu, BackwardOp::dgrad_scatter})
    for (const BackwardVariant& x : backward_space(*find_target("gfx950"), DType::bf16, Preset::default_, op)) {
      EXPECT_EQ(x.op, op);
      EXPECT_FALSE(why_illegal(x)) << x.name();
    }
}

TEST(DgradEmit, TheStage2BackwardUnitIsPinned) {
  BackwardVariant v = make("sm_90a", "mma_m16n8k16_f32_bf16", 32, 64, 32, 2, 2, 2);
  v.op = BackwardOp::dgrad_swiglu;
  auto src = emit_backward(v);
  ASSERT_TRUE(src) << src.error().describe();
  EXPECT_EQ(src->name, "ft_sm_90a_dgrad2_bf16_m32n64k32_w2x2_mma16x8x16_s2");
  check_golden(*src);
}

TEST(KGroupedEmit, IllegalIsOneLineAndTheUnitIsPinned) {
  auto bad = emit_backward(make("gfx942", "mfma_f32_16x16x16_bf16", 48, 64, 32, 2, 2, 2));
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, Errc::invalid_input);
  EXPECT_EQ(bad.error().describe().find('\n'), std::string::npos);

  auto src = emit_backward(make("gfx942", "mfma_f32_16x16x16_bf16", 64, 64, 32, 2, 2, 2));
  ASSERT_TRUE(src) << src.error().describe();
  EXPECT_EQ(src->name, "ft_gfx942_kgrouped_bf16_m64n64k32_w2x2_mfma16x16x16_s2");
  ASSERT_EQ(src->entry_points, std::vector<std::string>{src->name});
  check_golden(*src);
}

}  // namespace
}  // namespace ft
