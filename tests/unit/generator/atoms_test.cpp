// The host view of the atom tables (generator/atoms.hpp): the fp8 rows carry
// their operand format and size, agree with each target's fp8 flavour, count
// their registers in 32-bit units, and leave the bf16 / f16 lists as they were.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "generator/atoms.hpp"

namespace ft {
namespace {

std::vector<std::string> ids(const std::vector<const AtomInfo*>& atoms) {
  std::vector<std::string> out;
  for (const AtomInfo* a : atoms) out.emplace_back(a->id);
  return out;
}

// The 16-bit lists are exactly the ones before fp8 rows existed, in table order.
TEST(Atoms, SixteenBitListsAreUnchanged) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ids(atoms_for(*find_target("gfx90a"), DType::bf16)), (V{"mfma_f32_16x16x16_bf16", "mfma_f32_32x32x8_bf16"}));
  EXPECT_EQ(ids(atoms_for(*find_target("gfx942"), DType::bf16)), (V{"mfma_f32_16x16x16_bf16", "mfma_f32_32x32x8_bf16"}));
  EXPECT_EQ(ids(atoms_for(*find_target("gfx942"), DType::f16)), (V{"mfma_f32_16x16x16_f16", "mfma_f32_32x32x8_f16"}));
  EXPECT_EQ(ids(atoms_for(*find_target("gfx950"), DType::bf16)),
            (V{"mfma_f32_16x16x16_bf16", "mfma_f32_32x32x8_bf16", "mfma_f32_16x16x32_bf16", "mfma_f32_32x32x16_bf16"}));
  EXPECT_EQ(ids(atoms_for(*find_target("gfx950"), DType::f16)),
            (V{"mfma_f32_16x16x16_f16", "mfma_f32_32x32x8_f16", "mfma_f32_16x16x32_f16", "mfma_f32_32x32x16_f16"}));
  EXPECT_EQ(ids(atoms_for(*find_target("sm_90a"), DType::bf16)), (V{"mma_m16n8k16_f32_bf16", "wgmma_m64k16_f32_bf16"}));
  EXPECT_EQ(ids(atoms_for(*find_target("sm_90a"), DType::f16)), (V{"mma_m16n8k16_f32_f16", "wgmma_m64k16_f32_f16"}));
}

TEST(Atoms, Fp8RowsPerTarget) {
  using V = std::vector<std::string>;
  EXPECT_TRUE(atoms_for(*find_target("gfx90a"), DType::e4m3).empty());
  EXPECT_EQ(ids(atoms_for(*find_target("gfx942"), DType::e4m3)), (V{"mfma_f32_16x16x32_e4m3fnuz", "mfma_f32_32x32x16_e4m3fnuz"}));
  EXPECT_EQ(ids(atoms_for(*find_target("gfx950"), DType::e4m3)), (V{"mfma_f32_16x16x32_e4m3", "mfma_f32_32x32x16_e4m3"}));
  EXPECT_EQ(ids(atoms_for(*find_target("sm_90a"), DType::e4m3)), (V{"mma_m16n8k32_f32_e4m3", "wgmma_m64k32_f32_e4m3"}));
}

// One fact in two columns, held together: an fp8 row reads the format of every
// target it lists (targets.def's fp8 column), and every 16-bit row is 2 bytes.
TEST(Atoms, OperandFormatsMatchTheTargetsFp8Flavour) {
  for (const AtomInfo& a : all_atoms()) {
    EXPECT_EQ(a.operand_bytes(), a.dtype == DType::e4m3 ? 1 : 2) << a.id;
    EXPECT_EQ(a.dtype == DType::bf16, a.operand == Elem::bf16) << a.id;
    EXPECT_EQ(a.dtype == DType::f16, a.operand == Elem::f16) << a.id;
    for (const Target& t : all_targets()) {
      if (!a.available_on(t.name) || a.dtype != DType::e4m3) continue;
      EXPECT_NE(t.fp8, Fp8Flavour::none) << a.id << " on " << t.name;
      EXPECT_EQ(a.operand, t.fp8 == Fp8Flavour::fnuz ? Elem::e4m3fnuz : Elem::e4m3) << a.id << " on " << t.name;
    }
  }
}

// a_regs / b_regs count elements; a_registers / b_registers count 32-bit
// registers: 8 fp8 values per lane are 2 registers, like 4 bf16 values.
TEST(Atoms, RegistersCountBytesNotElements) {
  struct Row {
    const char* id;
    int a_elems, b_elems, a_registers, b_registers, c_regs;
  };
  for (const Row& r : {Row{"mfma_f32_16x16x16_bf16", 4, 4, 2, 2, 4}, Row{"mfma_f32_32x32x8_bf16", 4, 4, 2, 2, 16},
                       Row{"mfma_f32_16x16x32_bf16", 8, 8, 4, 4, 4}, Row{"mfma_f32_16x16x32_e4m3fnuz", 8, 8, 2, 2, 4},
                       Row{"mfma_f32_32x32x16_e4m3fnuz", 8, 8, 2, 2, 16}, Row{"mfma_f32_16x16x32_e4m3", 8, 8, 2, 2, 4},
                       Row{"mma_m16n8k16_f32_bf16", 8, 4, 4, 2, 4}, Row{"mma_m16n8k32_f32_e4m3", 16, 8, 4, 2, 4}}) {
    const AtomInfo* a = find_atom(r.id);
    ASSERT_NE(a, nullptr) << r.id;
    EXPECT_EQ(a->a_regs(), r.a_elems) << r.id;
    EXPECT_EQ(a->b_regs(), r.b_elems) << r.id;
    EXPECT_EQ(a->a_registers(), r.a_registers) << r.id;
    EXPECT_EQ(a->b_registers(), r.b_registers) << r.id;
    EXPECT_EQ(a->c_regs(), r.c_regs) << r.id;
  }
  // For every 16-bit row the registers are half the elements: the variant's
  // register estimate ((a_regs + b_regs) / 2 today) is unchanged by counting in registers.
  for (const AtomInfo& a : all_atoms()) {
    if (a.operand_bytes() == 2) {
      EXPECT_EQ(a.a_registers() * 2, a.a_regs()) << a.id;
    }
  }
}

TEST(Atoms, Fp8RowsNameTheirInstructions) {
  EXPECT_EQ(find_atom("mfma_f32_16x16x32_e4m3fnuz")->mnemonic_on(*find_target("gfx942")), "v_mfma_f32_16x16x32_fp8_fp8");
  EXPECT_EQ(find_atom("mfma_f32_32x32x16_e4m3")->mnemonic_on(*find_target("gfx950")), "v_mfma_f32_32x32x16_fp8_fp8");
  const AtomInfo& w = *find_atom("wgmma_m64k32_f32_e4m3");
  EXPECT_TRUE(w.warpgroup());
  EXPECT_EQ(w.k, 32);
  EXPECT_EQ(w.k * w.operand_bytes(), 32);  // one k32 step is 32 bytes of a 128-byte row, as bf16's k16
  EXPECT_EQ(find_atom("mma_m16n8k32_f32_e4m3")->short_name(), "mma16x8x32");
}

}  // namespace
}  // namespace ft
