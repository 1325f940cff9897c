#include "compile/analyze/ptx_report.hpp"

#include <gtest/gtest.h>

namespace ft {
namespace {

// Two entries, one with spills, in the shape NVRTC 13's ptxas -v prints.
constexpr std::string_view kLog = R"(ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'ft_a' for 'sm_90a'
ptxas info    : Function properties for ft_a
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 18 registers, used 1 barriers, 2048 bytes smem
ptxas info    : Compiling entry function 'ft_b' for 'sm_90a'
ptxas info    : Function properties for ft_b
ptxas         .     40 bytes stack frame, 36 bytes spill stores, 32 bytes spill loads
ptxas info    : Used 255 registers, used 2 barriers, 49152 bytes smem, 400 bytes cmem[0]
ptxas info    : Compile time = 11.606 ms
)";

TEST(PtxasReport, ReadsEachEntry) {
  auto a = parse_ptxas_report(kLog, "ft_a");
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_EQ(a->registers, 18);
  EXPECT_EQ(a->barriers, 1);
  EXPECT_EQ(a->smem_bytes, 2048);
  EXPECT_EQ(a->cmem0_bytes, 0);
  EXPECT_EQ(a->stack_bytes, 0);
  EXPECT_EQ(a->spill_store_bytes, 0);

  auto b = parse_ptxas_report(kLog, "ft_b");
  ASSERT_TRUE(b) << b.error().describe();
  EXPECT_EQ(b->registers, 255);
  EXPECT_EQ(b->barriers, 2);
  EXPECT_EQ(b->smem_bytes, 49152);
  EXPECT_EQ(b->cmem0_bytes, 400);
  EXPECT_EQ(b->stack_bytes, 40);
  EXPECT_EQ(b->spill_store_bytes, 36);
  EXPECT_EQ(b->spill_load_bytes, 32);
}

// ptxas names the function in its wgmma performance warnings, printed before
// the entry's "Compiling" line.
TEST(PtxasReport, KeepsTheEntrysWgmmaSerialisationWarning) {
  const std::string log = std::string(
                              "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are "
                              "serialized due to non wgmma instructions defining accumulator registers of a wgmma "
                              "between start and end of the pipeline stage in the function 'ft_b'\n") +
                          std::string(kLog);
  auto b = parse_ptxas_report(log, "ft_b");
  ASSERT_TRUE(b) << b.error().describe();
  EXPECT_TRUE(b->wgmma_serialized.starts_with("(C7515) Potential Performance Loss: wgmma.mma_async")) << b->wgmma_serialized;
  EXPECT_EQ(b->registers, 255);
  auto a = parse_ptxas_report(log, "ft_a");  // another entry's warning is not ft_a's
  ASSERT_TRUE(a) << a.error().describe();
  EXPECT_TRUE(a->wgmma_serialized.empty()) << a->wgmma_serialized;
  auto clean = parse_ptxas_report(kLog, "ft_b");
  ASSERT_TRUE(clean);
  EXPECT_TRUE(clean->wgmma_serialized.empty());
}

TEST(PtxasReport, MissingEntryIsNotFound) {
  auto r = parse_ptxas_report(kLog, "ft_c");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, Errc::not_found);
  EXPECT_FALSE(parse_ptxas_report("", "ft_a"));
  EXPECT_FALSE(parse_ptxas_report("ptxas info    : Compiling entry function 'ft_a' for 'sm_90a'\n", "ft_a"));
}

constexpr std::string_view kPtx = R"(
.version 9.0
.target sm_90a
.address_size 64

.visible .entry other(.param .u64 p) { ret; }

	// .globl	ft_k
.visible .entry ft_k(
	.param .u64 ft_k_param_0
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<12>;
	.reg .f32 	%f<8>;
	.shared .align 4 .b8 _ZZ4ft_kE4tile[2048];

	ld.param.u64 	%rd1, [ft_k_param_0];   // a comment; with a semicolon
	mov.u32 	%r1, %tid.x;
	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;
	// begin inline asm
	mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1,%f2,%f3,%f4}, {%r2,%r3,%r4,%r5}, {%r6,%r7}, {%f1,%f2,%f3,%f4};
	// end inline asm
	{ mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%f1,%f2,%f3,%f4}, {%r2,%r3,%r4,%r5}, {%r6,%r7}, {%f1,%f2,%f3,%f4}; }
	wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%f1}, %rd2, %rd3, 1, 1, 1, 0, 0;
$L__BB0_2:
	bar.sync 	0;
	ret;

}
)";

TEST(PtxInstructions, CountsTheEntrysMatrixOps) {
  auto mix = count_ptx_instructions(kPtx, "ft_k");
  ASSERT_TRUE(mix) << mix.error().describe();
  EXPECT_EQ(mix->matrix_ops, (std::map<std::string, int>{{"mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", 2},
                                                         {"wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", 1}}));
  // ld.param, mov, setp, bra, mma x2, wgmma, bar.sync, ret
  EXPECT_EQ(mix->instructions, 9);
  auto other = count_ptx_instructions(kPtx, "other");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->instructions, 1);
  EXPECT_FALSE(count_ptx_instructions(kPtx, "ft_missing"));
}

}  // namespace
}  // namespace ft
