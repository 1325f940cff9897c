// The layer's support kernels under emulation: align/sort against the CPU
// (per-expert sets: order within an expert may differ), the weight pre-shuffle
// and tiling against the host arrangement (bitwise), the seeded fill against the host
// generator (bitwise), on every target.
#include <gtest/gtest.h>

#include <algorithm>

#include "layer/program.hpp"
#include "tests/emu/layer_support.hpp"
#include "layer/device_structs.hpp"
#include "measure/workload/shuffle.hpp"

namespace ft::emu::test {
namespace {

class SupportKernels : public ::testing::TestWithParam<const char*> {};

// The align kernels of the support unit: the one-block align and the wide
// align's count and scatter launches.
RoleKernels align_kernels(TargetBench& bench, const Target& t) {
  const KernelSource support = emit_support(t, DType::bf16);
  RoleKernels k;
  k.of(Role::align) = *bench.entry(support, align_entry(t));
  k.of(Role::align_count) = *bench.entry(support, align_count_entry(t));
  k.of(Role::align_scatter) = *bench.entry(support, align_scatter_entry(t));
  return k;
}

struct AlignCase {
  int tokens, block;
  AlignForm form;
};

// Both forms at small T (the wide align with one block), and the wide align
// over several blocks with a ragged last chunk: 2 x 2100 = 4200 pairs (two
// blocks of align_chunk = 4096), 2 x 5003 = 10006 (three).
constexpr AlignCase kAlignCases[] = {
    {1, 16, AlignForm::one_block}, {7, 32, AlignForm::one_block},  {33, 64, AlignForm::one_block},
    {100, 16, AlignForm::one_block}, {100, 64, AlignForm::one_block}, {1, 16, AlignForm::wide},
    {33, 64, AlignForm::wide},      {100, 32, AlignForm::wide},     {2100, 64, AlignForm::wide},
    {5003, 16, AlignForm::wide},    {5003, 64, AlignForm::one_block}};

// Expert counts for the block scan of the padded offsets (moe_align.hpp,
// padded_offsets): the small problem's 4 with every case above; 7 (not a power
// of two), 128 and 256 (the scan's log2 rounds), 300 (more experts than the
// block's threads) with a few (smaller layers: only the routing matters here).
struct ExpertCase {
  int experts, hidden, inter;
  bool every_case;
};
constexpr ExpertCase kExpertCases[] = {{4, 0, 0, true}, {7, 128, 128, false}, {128, 128, 128, false},
                                       {256, 128, 128, false}, {300, 128, 128, false}};
bool few_cases(const AlignCase& ac) { return ac.tokens == 1 || ac.tokens == 33 || ac.tokens == 2100; }

TEST_P(SupportKernels, AlignMatchesTheCpu) {
  const Target& t = target(GetParam());
  TargetBench& bench = TargetBench::of(t);
  const RoleKernels align = align_kernels(bench, t);
  ASSERT_TRUE(align.of(Role::align).p && align.of(Role::align_count).p && align.of(Role::align_scatter).p);
  ASSERT_EQ(align_blocks(2 * 5003), 3);  // the multi-block cases above really take several blocks
  for (const ExpertCase& ec : kExpertCases)
  for (const AlignCase& ac : kAlignCases) {
    if (!ec.every_case && !few_cases(ac)) continue;
    const int tokens = ac.tokens, block = ac.block;
    for (const char* routing : {"uniform", "hot:2", "zipf:1.5", "masked"}) {
        Problem p = small_problem(DType::bf16);
        if (!ec.every_case) p.experts = ec.experts, p.hidden = ec.hidden, p.inter = ec.inter;
        const bool masked = std::string_view(routing) == "masked";
        p.routing = *Routing::parse(masked ? "uniform" : routing);
        auto w = make_workload(p, tokens, WorkloadOptions{9, tokens > 1 ? 1 : 0});
        ASSERT_TRUE(w) << w.error().describe();
        // Masked: some slots -1 (another rank's expert: left out), some ids
        // outside [-1, E) (left out and counted).
        int bad = 0;
        if (masked)
          for (std::size_t i = 0; i < w->topk_ids.size(); ++i) {
            if (i % 7 == 3) w->topk_ids[i] = -1;
            else if (i % 11 == 5) w->topk_ids[i] = p.experts + int(i % 3), ++bad;
          }
        auto dw = DeviceWorkload::upload(bench.device(), *w);
        ASSERT_TRUE(dw);
        auto got = run_align(*dw, t, align, block, ac.form);
        ASSERT_TRUE(got) << got.error().describe();
        const AlignReference want = reference_align(*w, block);
        const std::string where = fmt::format("{} E={} T={} block={} {} {}", t.name, p.experts, tokens, block, routing,
                                              ac.form == AlignForm::wide ? "wide" : "one block");
        ASSERT_EQ(got->padded_rows, want.padded_rows) << where;
        ASSERT_EQ(got->bad_ids, bad) << where;
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
