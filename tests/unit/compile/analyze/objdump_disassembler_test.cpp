// Reading llvm-objdump's listing of one kernel (the disassembler for targets newer than the
// in-process LLVM, e.g. gfx950 with LLVM 19 loaded).
#include "compile/analyze/objdump_disassembler.hpp"

#include <gtest/gtest.h>

namespace ft {
namespace {

TEST(ObjdumpListing, CountsTheNamedKernelOnly) {
  std::string listing =
      "\nk.hsaco:\tfile format elf64-amdgpu\n\nDisassembly of section .text:\n\n"
      "<other>:\n"
      "\tv_mfma_f32_32x32x16_bf16 a[0:15], v[0:3], v[4:7], a[0:15] // 000000001500: D3B70000\n"
      "\n"
      "<k>:\n"
      "\ts_load_dwordx4 s[0:3], s[0:1], 0x0                         // 000000001600: C00A0000 00000000\n"
      "\tv_mfma_f32_16x16x32_bf16 v[0:3], v[6:9], v[10:13], v[0:3]  // 00000000162C: D3B50000 04021506\n"
      "\tv_mfma_f32_16x16x32_bf16 v[0:3], v[6:9], v[10:13], v[0:3]  // 000000001634: D3B50000 04021506\n"
      "\t<unknown>                                                  // 00000000163C: FFFFFFFF\n"
      "\ts_endpgm                                                   // 000000001640: BF810000\n";
  InstructionMix mix = parse_objdump_listing(listing, "k");
  EXPECT_EQ(mix.total, 4);
  EXPECT_EQ(mix.undecoded, 1);
  EXPECT_EQ(mix.mnemonics["v_mfma_f32_16x16x32_bf16"], 2);
  EXPECT_EQ(mix.mnemonics.count("v_mfma_f32_32x32x16_bf16"), 0u);
  EXPECT_EQ(mix.mnemonics["s_endpgm"], 1);
  EXPECT_EQ(parse_objdump_listing(listing, "missing").total, 0);
}

}  // namespace
}  // namespace ft
