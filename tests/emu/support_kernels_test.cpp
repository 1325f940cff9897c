// The layer's support kernels under emulation: align/sort against the CPU
// (per-expert sets: order within an expert may differ), the weight pre-shuffle
// and tiling against the host arrangement (bitwise), the seeded fill against the host
// generator (bitwise), on every target.
#include <gtest/gtest.h>

#include <algorithm>

#include "layer/program.hpp"
#include "tests/emu/layer_support.hpp"
#include "layer/device_structs.hpp"
#include "tuner/workload/shuffle.hpp"

namespace ft::emu::test {
namespace {

class SupportKernels : public ::testing::TestWithParam<const char*> {};

TEST_P(SupportKernels, AlignMatchesTheCpu) {
  const Target& t = target(GetParam());
  TargetBench& bench = TargetBench::of(t);
  auto align = bench.entry(emit_support(t, DType::bf16), align_entry(t));
  ASSERT_TRUE(align) << align.error().describe();
  for (int tokens : {1, 7, 33, 100})
    for (int block : {16, 32, 64}) {
      for (const char* routing : {"uniform", "hot:2", "zipf:1.5"}) {
        Problem p = small_problem(DType::bf16);
        p.routing = *Routing::parse(routing);
        auto w = make_workload(p, tokens, WorkloadOptions{9, tokens > 1 ? 1 : 0});
        ASSERT_TRUE(w) << w.error().describe();
        auto dw = DeviceWorkload::upload(bench.device(), *w);
        ASSERT_TRUE(dw);
        auto got = run_align(*dw, t, *align, block);
        ASSERT_TRUE(got) << got.error().describe();
        const AlignReference want = reference_align(*w, block);
        const std::string where = fmt::format("{} T={} block={} {}", t.name, tokens, block, routing);
        ASSERT_EQ(got->padded_rows, want.padded_rows) << where;
        ASSERT_EQ(got->block_experts, want.block_experts) << where;
        const int pad = int(w->pairs());
        for (int e = 0; e < p.experts; ++e) {
          const int begin = want.expert_offset[std::size_t(e)], end = want.expert_offset[std::size_t(e) + 1];
          std::vector<int> run(got->sorted_ids.begin() + begin, got->sorted_ids.begin() + end);
          std::vector<int> ids;
          int pads = 0;
          for (int id : run) {
            if (id == pad) ++pads;
            else ids.push_back(id);
          }
          std::sort(ids.begin(), ids.end());
          EXPECT_EQ(ids, want.expert_pairs[std::size_t(e)]) << where << " expert " << e;
          EXPECT_EQ(pads, (end - begin) - int(want.expert_pairs[std::size_t(e)].size())) << where << " expert " << e;
        }
      }
    }
}

TEST_P(SupportKernels, ShuffleKernelEqualsHostArrangement) {
  const Target& t = target(GetParam());
  TargetBench& bench = TargetBench::of(t);
  auto shuffle = bench.entry(emit_support(t, DType::bf16), shuffle_entry(t));
  ASSERT_TRUE(shuffle) << shuffle.error().describe();
  const Case& c = case_for(DType::bf16, 1);
  const Problem& p = c.workload.problem;
  const struct {
    const std::vector<std::uint16_t>& w;
    long long rows, cols;
  } mats[] = {{c.workload.w1, (long long)p.experts * 2 * p.inter, p.hidden}, {c.workload.w2, (long long)p.experts * p.hidden, p.inter}};
  for (const auto& m : mats) {
    auto device = run_shuffle(bench.device(), *shuffle, m.w, m.rows, m.cols);
    ASSERT_TRUE(device) << device.error().describe();
    auto host = arrange_weights_host(m.w, m.rows, m.cols, WeightLayout::shuffled);
    ASSERT_TRUE(host);
    EXPECT_TRUE(*device == *host) << t.name << ": the shuffle kernel and the host shuffle disagree";
    // The same kernel with ShuffleArgs::layout = tiled writes the tiled layout.
    auto device_tiled = run_shuffle(bench.device(), *shuffle, m.w, m.rows, m.cols, WeightLayout::tiled);
    ASSERT_TRUE(device_tiled) << device_tiled.error().describe();
    auto host_tiled = arrange_weights_host(m.w, m.rows, m.cols, WeightLayout::tiled);
    ASSERT_TRUE(host_tiled) << host_tiled.error().describe();
    EXPECT_TRUE(*device_tiled == *host_tiled) << t.name << ": the shuffle kernel in tiled mode and the host tiling disagree";
    EXPECT_FALSE(*device_tiled == *device) << t.name << ": tiled and shuffled outputs must differ";
  }
}

TEST_P(SupportKernels, FillKernelEqualsHostGenerator) {
  const Target& t = target(GetParam());
  TargetBench& bench = TargetBench::of(t);
  auto fill = bench.entry(emit_support(t, DType::f16), fill_entry(t));
  ASSERT_TRUE(fill) << fill.error().describe();
  for (DType d : {DType::bf16, DType::f16}) {
    const Case& c = case_for(d, 7);
    const Problem& p = c.workload.problem;
    const std::size_t count = c.workload.w2.size();
    auto out = DeviceBuffer::allocate(bench.device(), count * 2);
    ASSERT_TRUE(out);
    FillArgs a{device_pointer<u16>(out->ptr()), count, tensor_seed(c.workload.seed, TensorStream::w2),
               tensor_scale(p, TensorStream::w2), d == DType::bf16 ? 0 : 1};
    const LaunchShape s = fill_launch(count);
    ASSERT_TRUE(bench.device().launch(*fill, {unsigned(s.grid_x), 1, 1}, {unsigned(s.block), 1, 1}, 0, {}, &a, sizeof a));
    std::vector<std::uint16_t> got(count);
    ASSERT_TRUE(bench.device().copy_to_host(got.data(), out->ptr(), count * 2));
    EXPECT_TRUE(got == c.workload.w2) << t.name << " " << to_string(d) << ": device fill and host generator disagree";
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, SupportKernels, ::testing::Values("gfx90a", "gfx942", "gfx950", "sm_90a"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace ft::emu::test
