// The tensor-map copies (issue 49; templates/ft/port_cuda.hpp: tensor_load_2d,
// tensor_store_2d and their commit / wait) through NVRTC and ptxas for sm_90a:
// the emulator tests' probe unit (tests/emu/units/tma_probe.cpp, run there on
// the emulated sm_90a) builds, and its PTX holds the TMA load into shared
// memory completing on an mbarrier, the store from shared memory in a bulk
// group, the commit and the read wait, with no spill.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "compile/analyze/analyze.hpp"
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

}  // namespace
}  // namespace ft
