// The tensor-map copies (issue 49; templates/ft/port_cuda.hpp: tensor_load_2d,
// tensor_store_2d and their commit / wait) through NVRTC and ptxas for sm_90a:
// the emulator tests' probe unit (tests/emu/units/tma_probe.cpp, run there on
// the emulated sm_90a) builds, and its PTX holds the TMA load into shared
// memory completing on an mbarrier, the store from shared memory in a bulk
// group, the commit and the read wait, with no spill. And the stages that read
// their weights through a tensor map (WeightLayout::mapped, "_map"): bf16 and
// fp8, stage 1 and 2, one-tile and persistent (ping-pong; three consumers) blocks
// build with the tensor load and no 1-D bulk copy, their wgmma unserialised,
// no spill and the LDS the generator computes.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "compile/analyze/analyze.hpp"
#include "generator/emitter.hpp"
#include "generator/space.hpp"
#include "tests/compile/compile_test_support.hpp"

namespace ft {
namespace {

TEST(TmaCompile, TheProbeUnitBuildsForSm90aWithTheTensorCopies) {
  const Target& target = *find_target("sm_90a");
  FT_SKIP_UNLESS_BUILDABLE(target);
  std::ifstream in(FT_TMA_PROBE_UNIT);
  std::stringstream ss;
  ss << in.rdbuf();
  ASSERT_FALSE(ss.str().empty()) << "cannot read " << FT_TMA_PROBE_UNIT;
  const KernelSource unit{"tma_probe", ss.str(), {"ft_probe_tma_load", "ft_probe_tma_store"}};
  auto object = compile(unit, target, test::compile_options_for(test::current_test_id(), std::nullopt));
  ASSERT_TRUE(object) << object.error().describe();
  for (const char* ptx : {"cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes",
                          "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group", "cp.async.bulk.commit_group",
                          "cp.async.bulk.wait_group.read 0"})
    EXPECT_NE(object->ptx.find(ptx), std::string::npos) << ptx;
  for (const char* entry : {"ft_probe_tma_load", "ft_probe_tma_store"}) {
    auto r = analyze(*object, target, entry, 128, 4096);
    ASSERT_TRUE(r) << entry << ": " << r.error().describe();
    EXPECT_FALSE(r->spills) << entry << ": " << r->notes;
  }
}

struct MappedCase {
  StageRole role;
  const char* atom;
  int tile_m, tile_n, warps_m, stages, tiles;
  bool pingpong = false;
};

TEST(TmaCompile, MappedWeightStagesBuildWithTensorLoadsAndNoSpills) {
  const Target& target = *find_target("sm_90a");
  FT_SKIP_UNLESS_BUILDABLE(target);
  const Problem mixtral = test::mixtral();
  const MappedCase cases[] = {
      {StageRole::stage1, "wgmma_m64k16_f32_bf16", 64, 128, 8, 4, 8, true},
      {StageRole::stage2, "wgmma_m64k16_f32_bf16", 128, 256, 8, 4, 1},
      {StageRole::stage1, "wgmma_m64k16_f32_bf16", 192, 32, 12, 3, 8},
      {StageRole::stage1, "wgmma_m64k32_f32_e4m3", 128, 128, 8, 4, 1},
  };
  for (const MappedCase& c : cases) {
    const AtomInfo& atom = *find_atom(c.atom);
    Variant v = Variant::of(target, c.role, atom);
    v.set("tile_m", c.tile_m).set("tile_n", c.tile_n).set("tile_k", atom.dtype == DType::e4m3 ? 128 : 64);
    v.set("warps_m", c.warps_m).set("warps_n", 1).set("stages", c.stages).set("warp_specialized", 1);
    v.set("tiles_per_block", c.tiles).set("layout", int(WeightLayout::mapped));
    if (c.pingpong) v.set("pingpong", 1);
    Problem p = mixtral;
    p.dtype = atom.dtype;
    if (atom.dtype == DType::e4m3) {
      p.scales = Scales::per_tensor;
      v.set("scales", int(Scales::per_tensor)).set("promote", 0);
    }
    const auto why = why_illegal(v, p);
    ASSERT_FALSE(why) << v.name() << ": " << *why;
    ASSERT_NE(v.name().find("_map"), std::string::npos) << v.name();
    auto object = compile(emit_variant(v), target, test::compile_options_for(test::current_test_id(), std::nullopt));
    ASSERT_TRUE(object) << v.name() << ": " << object.error().describe();
    EXPECT_NE(object->ptx.find("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"),
              std::string::npos) << v.name();
    EXPECT_EQ(object->ptx.find("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"), std::string::npos)
        << v.name() << ": a 1-D bulk copy left";
    auto r = analyze(*object, target, v.name(), v.threads(), v.lds_bytes());
    ASSERT_TRUE(r) << v.name() << ": " << r.error().describe();
    EXPECT_FALSE(r->spills) << v.name() << ": " << r->notes;
    EXPECT_FALSE(r->serialized_mma) << v.name() << ": " << r->notes;
    EXPECT_EQ(r->lds_bytes, v.lds_bytes()) << v.name();
  }
}

}  // namespace
}  // namespace ft
