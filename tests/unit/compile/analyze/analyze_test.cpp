#include "compile/analyze/analyze.hpp"

#include <gtest/gtest.h>

#include "tests/unit/compile/test_kernels.hpp"
#include "compile/analyze/amdgpu_metadata.hpp"
#include "compile/analyze/llvm_disassembler.hpp"

namespace ft {
namespace {

using test::amd_headers;
using test::amd_mfma_kernel;
using test::amd_scratch_kernel;
using test::nvidia_headers;
using test::nvidia_mma_kernel;
using test::options_for;

#define FT_REQUIRE_LLVM()                                                          \
  do {                                                                             \
    if (auto llvm = llvm_library(); !llvm) GTEST_SKIP() << llvm.error().describe(); \
  } while (0)

struct AmdCase {
  Backend backend;
  const char* target;
  const char* mfma;  // what LLVM 19's disassembler prints for __builtin_amdgcn_mfma_f32_16x16x16bf16_1k
};

class AmdAnalysis : public ::testing::TestWithParam<AmdCase> {};

TEST_P(AmdAnalysis, CountsMfmaRegistersAndLds) {
  const AmdCase& c = GetParam();
  FT_REQUIRE_BACKEND(c.backend, c.target);
  FT_REQUIRE_LLVM();
  const Target& t = *find_target(c.target);
  auto headers = amd_headers();
  auto co = compile(amd_mfma_kernel("ft_test_analyze", 5), t, options_for(c.backend, headers));
  ASSERT_TRUE(co) << co.error().describe();

  auto r = analyze(*co, t, "ft_test_analyze", 256, 0);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->matrix_ops, (std::map<std::string, int>{{c.mfma, 5}}));
  EXPECT_GT(r->vgprs, 0);
  EXPECT_GT(r->sgprs, 0);
  EXPECT_EQ(r->regs, r->vgprs + r->agprs);
  EXPECT_EQ(r->lds_bytes, 1024);  // __shared__ float[256]
  EXPECT_EQ(r->scratch_bytes, 0);
  EXPECT_FALSE(r->spills) << r->notes;
  EXPECT_GT(r->instructions, 5);
  EXPECT_GT(r->occupancy, 0);
  EXPECT_LE(r->occupancy, t.max_waves_per_simd);
  EXPECT_EQ(r->occupancy, occupancy_per_simd(t, r->regs, 1024, 256));

  auto with_dynamic = analyze(*co, t, "ft_test_analyze", 256, 60 * 1024);
  ASSERT_TRUE(with_dynamic);
  EXPECT_EQ(with_dynamic->lds_bytes, 1024 + 60 * 1024);
  EXPECT_EQ(with_dynamic->occupancy, 1);  // one 4-wave block per CU fits in 64 KiB
  auto too_much = analyze(*co, t, "ft_test_analyze", 256, 64 * 1024);
  ASSERT_TRUE(too_much);
  EXPECT_EQ(too_much->occupancy, 0);
  EXPECT_NE(too_much->notes.find("exceeds"), std::string::npos) << too_much->notes;
}

TEST_P(AmdAnalysis, ScratchIsFlaggedAsSpilling) {
  const AmdCase& c = GetParam();
  FT_REQUIRE_BACKEND(c.backend, c.target);
  FT_REQUIRE_LLVM();
  const Target& t = *find_target(c.target);
  auto headers = amd_headers();
  auto co = compile(amd_scratch_kernel("ft_test_scratch"), t, options_for(c.backend, headers));
  ASSERT_TRUE(co) << co.error().describe();
  auto r = analyze(*co, t, "ft_test_scratch", 64, 0);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_GE(r->scratch_bytes, 256);  // 64 ints
  EXPECT_TRUE(r->spills);
  EXPECT_TRUE(r->matrix_ops.empty());
  EXPECT_NE(r->notes.find("scratch"), std::string::npos) << r->notes;
}

TEST_P(AmdAnalysis, UnknownKernelNamesTheKnownOnes) {
  const AmdCase& c = GetParam();
  FT_REQUIRE_BACKEND(c.backend, c.target);
  const Target& t = *find_target(c.target);
  auto headers = amd_headers();
  auto co = compile(amd_mfma_kernel("ft_test_named"), t, options_for(c.backend, headers));
  ASSERT_TRUE(co) << co.error().describe();
  auto r = analyze(*co, t, "ft_nope", 64, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_found);
  EXPECT_NE(r.error().message.find("ft_test_named"), std::string::npos) << r.error().message;
}

INSTANTIATE_TEST_SUITE_P(Targets, AmdAnalysis,
                         ::testing::Values(AmdCase{Backend::comgr, "gfx90a", "v_mfma_f32_16x16x16bf16_1k"},
                                           AmdCase{Backend::clang, "gfx942", "v_mfma_f32_16x16x16_bf16"}),
                         [](const auto& info) { return std::string(info.param.target); });

// An accumulator too large for 128 VGPRs: with launch bounds of one wave, LLVM
// moves it to AGPRs; .vgpr_count is then the unified count.
TEST(AmdAnalysisAgprs, UnifiedRegisterCount) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  FT_REQUIRE_LLVM();
  auto headers = amd_headers();
  KernelSource src{"ft_test_agpr", R"(#include "ft/port.hpp"
typedef float ft_f32x16 __attribute__((ext_vector_type(16)));
extern "C" __attribute__((global, amdgpu_flat_work_group_size(64, 64)))
void ft_test_agpr(const ft_bf16x4* a, const ft_bf16x4* b, ft_f32x16* c, int n) {
  int t = ft_lane();
  ft_f32x16 acc[8] = {};
  for (int i = 0; i < n; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a[t + i], b[t + j + i], acc[j], 0, 0, 0);
#pragma unroll
  for (int j = 0; j < 8; ++j) c[t * 8 + j] = acc[j];
}
)",
                   {"ft_test_agpr"}};
  const Target& t = *find_target("gfx942");
  auto co = compile(src, t, options_for(Backend::clang, headers));
  ASSERT_TRUE(co) << co.error().describe();
  auto r = analyze(*co, t, "ft_test_agpr", 64, 0);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_EQ(r->agprs, 128);  // 8 x 16 accumulators
  EXPECT_GT(r->vgprs, 0);
  EXPECT_EQ(r->regs, r->vgprs + r->agprs);
  EXPECT_EQ(r->occupancy, t.occupancy_for_registers(r->regs));
  EXPECT_EQ(r->matrix_ops.at("v_mfma_f32_32x32x8_bf16"), 8);
  EXPECT_FALSE(r->spills) << r->notes;
}

// Without launch bounds a block may hold 1024 threads, which leaves 128
// registers per lane: eight 16-float accumulators (plus operands) spill.
TEST(AmdAnalysisSpills, RegisterPressureSpills) {
  FT_REQUIRE_BACKEND(Backend::clang, "gfx942");
  FT_REQUIRE_LLVM();
  auto headers = amd_headers();
  KernelSource src{"ft_test_vgpr_spill", R"(#include "ft/port.hpp"
typedef float ft_f32x16 __attribute__((ext_vector_type(16)));
FT_GLOBAL void ft_test_vgpr_spill(const ft_bf16x4* a, const ft_bf16x4* b, ft_f32x16* c, int n) {
  int t = ft_lane();
  ft_f32x16 acc[8] = {};
  for (int i = 0; i < n; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) acc[j] = __builtin_amdgcn_mfma_f32_32x32x8bf16_1k(a[t + i], b[t + j + i], acc[j], 0, 0, 0);
#pragma unroll
  for (int j = 0; j < 8; ++j) c[t * 8 + j] = acc[j];
}
)",
                   {"ft_test_vgpr_spill"}};
  const Target& t = *find_target("gfx942");
  auto co = compile(src, t, options_for(Backend::clang, headers));
  ASSERT_TRUE(co) << co.error().describe();
  auto r = analyze(*co, t, "ft_test_vgpr_spill", 1024, 0);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_TRUE(r->spills);
  EXPECT_GT(r->spill_bytes, 0);
  EXPECT_GT(r->scratch_bytes, 0);
  EXPECT_LE(r->regs, 128);
  EXPECT_NE(r->notes.find("spills"), std::string::npos) << r->notes;
}

TEST(NvidiaAnalysis, ParsesTheResourceReportAndCountsPtxMma) {
  FT_REQUIRE_BACKEND(Backend::nvrtc, "sm_90a");
  const Target& t = *find_target("sm_90a");
  auto headers = nvidia_headers();
  auto co = compile(nvidia_mma_kernel("ft_test_nv_analyze", 3), t, options_for(Backend::nvrtc, headers));
  ASSERT_TRUE(co) << co.error().describe();
  auto r = analyze(*co, t, "ft_test_nv_analyze", 128, 4096);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_GT(r->regs, 0);
  EXPECT_LE(r->regs, 255);
  EXPECT_EQ(r->lds_bytes, 2048 + 4096);  // __shared__ float[512] + dynamic
  EXPECT_FALSE(r->spills) << r->notes;
  EXPECT_EQ(r->matrix_ops, (std::map<std::string, int>{{"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 3}}));
  EXPECT_GT(r->instructions, 3);
  EXPECT_EQ(r->occupancy, occupancy_per_simd(t, r->regs, 2048 + 4096, 128));
  EXPECT_GT(r->occupancy, 0);
  EXPECT_NE(r->notes.find("PTX"), std::string::npos) << r->notes;
}

TEST(NvidiaAnalysis, SpillsAreFlagged) {
  FT_REQUIRE_BACKEND(Backend::nvrtc, "sm_90a");
  const Target& t = *find_target("sm_90a");
  // 48 values live across a barrier under a 24-register cap must spill.
  KernelSource src{"ft_test_nv_spill", R"(extern "C" __global__ void ft_test_nv_spill(const float* in, float* out) {
  float v[48];
#pragma unroll
  for (int k = 0; k < 48; ++k) v[k] = in[threadIdx.x + k * 1024];
  __syncthreads();
  float acc = 0;
#pragma unroll
  for (int k = 0; k < 48; ++k) acc += v[k] * v[47 - k] + v[(k * 7) % 48];
  out[threadIdx.x] = acc;
}
)",
                   {"ft_test_nv_spill"}};
  std::vector<EmbeddedFile> none;
  auto opts = options_for(Backend::nvrtc, none);
  opts.extra_flags = {"--maxrregcount=24"};
  auto co = compile(src, t, opts);
  ASSERT_TRUE(co) << co.error().describe();
  auto r = analyze(*co, t, "ft_test_nv_spill", 128, 0);
  ASSERT_TRUE(r) << r.error().describe();
  EXPECT_LE(r->regs, 24);
  EXPECT_GT(r->spill_bytes, 0);
  EXPECT_GT(r->scratch_bytes, 0);
  EXPECT_TRUE(r->spills);
  EXPECT_NE(r->notes.find("spill stores"), std::string::npos) << r->notes;
}

// Waves per SIMD from registers, LDS and block size (target rows as data).
struct OccupancyCase {
  const char* target;
  int regs, lds, threads, expected;
};

class Occupancy : public ::testing::TestWithParam<OccupancyCase> {};

TEST_P(Occupancy, FromRegistersLdsAndBlockSize) {
  const auto& c = GetParam();
  EXPECT_EQ(occupancy_per_simd(*find_target(c.target), c.regs, c.lds, c.threads), c.expected);
}

INSTANTIATE_TEST_SUITE_P(
    Table, Occupancy,
    ::testing::Values(OccupancyCase{"gfx942", 64, 0, 256, 8},         // 512 / 64 = 8 waves
                      OccupancyCase{"gfx942", 128, 0, 256, 4},        // 512 / 128
                      OccupancyCase{"gfx942", 152, 0, 64, 3},         // 512 / 152
                      OccupancyCase{"gfx942", 513, 0, 64, 0},         // over the 512 budget
                      OccupancyCase{"gfx942", 64, 32768, 256, 2},     // 2 blocks of 4 waves over 4 SIMDs
                      OccupancyCase{"gfx942", 64, 65536, 256, 1},     // one block per CU
                      OccupancyCase{"gfx942", 64, 65537, 256, 0},     // over the LDS limit
                      OccupancyCase{"gfx942", 256, 0, 1024, 0},       // 16 waves need 4 per SIMD, 2 fit
                      OccupancyCase{"gfx950", 64, 163840, 256, 1},
                      OccupancyCase{"sm_90a", 32, 0, 128, 16},        // 512 / 32 = 16 warps
                      OccupancyCase{"sm_90a", 168, 0, 128, 3},        // 512 / 168
                      OccupancyCase{"sm_90a", 64, 100 * 1024, 128, 2},  // 2 blocks x 4 warps over 4 sub-partitions
                      OccupancyCase{"sm_90a", 64, 113 * 1024, 128, 2},  // 2 x (113 + 1 KiB reserve) = 228 KiB
                      OccupancyCase{"sm_90a", 64, 114 * 1024, 128, 1},  // 2 x (114 + 1) KiB exceed the SM's 228
                      OccupancyCase{"sm_90a", 64, 232449, 128, 0}       // over the 227 KiB a block may opt in to
                      ));

}  // namespace
}  // namespace ft
