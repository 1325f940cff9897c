// Tensor maps (issue 49) on the emulated sm_90a: device/tensor_map.hpp's rules
// and encoding, and the emulator's TMA copies (templates/ft/port_emu.hpp) as the
// hardware lays them out -- each box row back to back in shared memory, the
// swizzle on the byte offsets, zeros for elements outside the matrix counted
// in the mbarrier's bytes, stores that leave the outside untouched. The
// expected layout is computed here from the element coordinates, and the
// 128-byte case is checked against swizzle128_offset, the layout the wgmma
// descriptors read (templates/ft/tensor_map.hpp, atom_wgmma.hpp), so a TMA box feeds wgmma as it stands.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "device/tensor_map.hpp"
#include "layer/device_structs.hpp"
#include "tests/emu/emu_test_support.hpp"
#include "generator/device_facts.hpp"

namespace ft::emu::test {
namespace {

struct TmaProbeArgs {
  TensorMap map;
  std::uint64_t out, in;
  int col, row, box_bytes, box_at;
};

// A 40 x 72 matrix of u16 (row stride 80 elements: padding between rows), element (r, c) = r * 1000 + c + 1.
constexpr std::uint32_t kRows = 40, kCols = 72, kStride = 80;
std::uint16_t value(std::uint32_t r, std::uint32_t c) { return std::uint16_t(r * 1000 + c + 1); }

struct Box {
  const char* label;
  std::uint32_t box_cols, box_rows, swizzle;
  int col, row;
  bool crosses_an_edge;  // some of the box lies outside the matrix
};

const Box kBoxes[] = {
    {"k_major_128B_inside", 64, 8, 128, 0, 16, false},
    {"k_major_128B_past_both_ends", 64, 16, 128, 40, 32, true},  // columns 72..103 and rows 40..47 are outside
    {"before_the_start", 64, 4, 128, -8, -2, true},
    {"64B", 32, 16, 64, 8, 3, false},
    {"32B", 16, 8, 32, 56, 36, true},
    {"no_swizzle", 8, 5, 0, 70, 1, true},
};

// The byte offset of box element (r, c) in shared memory.
std::uint32_t landed_at(const Box& b, std::uint32_t r, std::uint32_t c) {
  return swizzle_offset((r * b.box_cols + c) * 2, int(b.swizzle));
}

bool inside(const Box& b, std::uint32_t r, std::uint32_t c) {
  const long long gr = b.row + (long long)r, gc = b.col + (long long)c;
  return gr >= 0 && gc >= 0 && gr < kRows && gc < kCols;
}

class Tma : public testing::TestWithParam<Box> {
 protected:
  void SetUp() override {
    auto l = load(target("sm_90a"), unit_from_file("tma_probe.cpp", {"ft_probe_tma_load", "ft_probe_tma_store"}));
    ASSERT_TRUE(l) << l.error().describe();
    loaded_ = std::move(*l);
    std::vector<std::uint16_t> m(kRows * kStride, 0xdeadu);
    for (std::uint32_t r = 0; r < kRows; ++r)
      for (std::uint32_t c = 0; c < kCols; ++c) m[r * kStride + c] = value(r, c);
    matrix_ = *dev().alloc(m.size() * 2);
    ASSERT_TRUE(dev().copy_to_device(matrix_, m.data(), m.size() * 2));
    box_ = *dev().alloc(256 * 256 * 2);
  }
  void TearDown() override {
    if (loaded_.device) (void)dev().free(matrix_), (void)dev().free(box_);
  }
  EmuDevice& dev() { return *loaded_.device; }
  TensorMapSpec spec(const Box& b) const {
    return TensorMapSpec{matrix_, kStride * 2, kCols, kRows, b.box_cols, b.box_rows, 2, b.swizzle};
  }
  Result<TensorMap> map_of(const Box& b) {
    TensorMap m;
    FT_CHECK(dev().encode_tensor_map(spec(b), std::as_writable_bytes(std::span(m.bytes))));
    return m;
  }
  Result<std::vector<unsigned char>> run_load(const Box& b, int box_at = 1024) {
    TmaProbeArgs a{FT_TRY(map_of(b)), box_, 0, b.col, b.row, int(box_bytes(spec(b))), box_at};
    FT_CHECK(dev().launch(loaded_.fn("ft_probe_tma_load"), {1, 1, 1}, {128, 1, 1}, 1024 + a.box_bytes, {}, &a, sizeof a));
    std::vector<unsigned char> out(std::size_t(a.box_bytes));
    FT_CHECK(dev().copy_to_host(out.data(), box_, out.size()));
    return out;
  }
  Loaded loaded_;
  DevicePtr matrix_ = 0, box_ = 0;
};

TEST_P(Tma, ALoadLaysTheBoxOutSwizzledWithZerosOutside) {
  const Box& b = GetParam();
  auto got = run_load(b);
  ASSERT_TRUE(got) << got.error().describe();
  int outside = 0, moved_by_swizzle = 0;
  for (std::uint32_t r = 0; r < b.box_rows; ++r)
    for (std::uint32_t c = 0; c < b.box_cols; ++c) {
      std::uint16_t v;
      std::memcpy(&v, got->data() + landed_at(b, r, c), 2);
      const std::uint16_t want = inside(b, r, c) ? value(b.row + r, b.col + c) : 0;
      ASSERT_EQ(v, want) << b.label << ": box element (" << r << ", " << c << ")";
      outside += !inside(b, r, c);
      moved_by_swizzle += landed_at(b, r, c) != (r * b.box_cols + c) * 2;
      if (b.box_cols * 2 == 128 && b.swizzle == 128) {  // the K-major wgmma operand layout, 64 bf16 per row
        ASSERT_EQ(landed_at(b, r, c), swizzle128_offset(int(r), int(c))) << "wgmma would read another layout";
      }
    }
  EXPECT_EQ(outside > 0, b.crosses_an_edge) << b.label;
  // A port that ignored the swizzle would leave every element at its linear offset.
  EXPECT_EQ(moved_by_swizzle > 0, b.swizzle != 0 && b.box_rows * b.box_cols * 2 > 128) << b.label;
}

TEST_P(Tma, AStoreWritesTheBoxInsideTheMatrixOnly) {
  const Box& b = GetParam();
  const TensorMapSpec s = spec(b);
  std::vector<unsigned char> in(box_bytes(s));
  for (std::uint32_t r = 0; r < b.box_rows; ++r)
    for (std::uint32_t c = 0; c < b.box_cols; ++c) {
      const std::uint16_t v = std::uint16_t(50000 + r * 300 + c);
      std::memcpy(in.data() + landed_at(b, r, c), &v, 2);
    }
  ASSERT_TRUE(dev().copy_to_device(box_, in.data(), in.size()));
  auto map = map_of(b);
  ASSERT_TRUE(map) << map.error().describe();
  TmaProbeArgs a{*map, 0, box_, b.col, b.row, int(in.size()), 1024};
  ASSERT_TRUE(dev().launch(loaded_.fn("ft_probe_tma_store"), {1, 1, 1}, {128, 1, 1}, 1024 + a.box_bytes, {}, &a, sizeof a));
  std::vector<std::uint16_t> m(kRows * kStride);
  ASSERT_TRUE(dev().copy_to_host(m.data(), matrix_, m.size() * 2));
  for (std::uint32_t r = 0; r < kRows; ++r)
    for (std::uint32_t c = 0; c < kStride; ++c) {
      const long long br = (long long)r - b.row, bc = (long long)c - b.col;
      const bool in_box = c < kCols && br >= 0 && bc >= 0 && br < b.box_rows && bc < b.box_cols;
      const std::uint16_t want = in_box ? std::uint16_t(50000 + br * 300 + bc) : c < kCols ? value(r, c) : 0xdeadu;
      ASSERT_EQ(m[r * kStride + c], want) << b.label << ": matrix element (" << r << ", " << c << ")";
    }
}

INSTANTIATE_TEST_SUITE_P(Boxes, Tma, testing::ValuesIn(kBoxes), [](const auto& i) { return std::string(i.param.label); });

TEST_F(Tma, AShiftedSwizzledDestinationAndMissingBytesFault) {
  const Box b = kBoxes[0];
  auto shifted = run_load(b, 1024 + 512);  // the 128-byte swizzle needs a 1024-aligned box
  ASSERT_FALSE(shifted);
  EXPECT_NE(shifted.error().message.find("not aligned to its swizzle"), std::string::npos) << shifted.error().message;
  // The load lands the whole box, 16 bytes more than expected: the phase never completes.
  TmaProbeArgs a{*map_of(b), box_, 0, b.col, b.row, int(box_bytes(spec(b))) - 16, 1024};
  auto r = dev().launch(loaded_.fn("ft_probe_tma_load"), {1, 1, 1}, {1, 1, 1}, 2048 + 1024, {}, &a, sizeof a);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("mbarrier wait never completed"), std::string::npos) << r.error().message;
}

struct Bad {
  const char* label;
  TensorMapSpec spec;
  const char* says;
};

TEST(TensorMapRules, EachBrokenRuleIsOneLine) {
  const TensorMapSpec ok{4096, 160, 72, 40, 64, 8, 2, 128};
  EXPECT_EQ(why_bad_tensor_map(ok), std::nullopt);
  auto with = [&](auto f) {
    TensorMapSpec s = ok;
    f(s);
    return s;
  };
  const Bad cases[] = {
      {"element", with([](auto& s) { s.elem_bytes = 3; }), "1, 2 or 4 bytes"},
      {"swizzle", with([](auto& s) { s.swizzle = 96; }), "0, 32, 64 or 128"},
      {"base", with([](auto& s) { s.base = 4104; }), "not 16-byte aligned"},
      {"empty", with([](auto& s) { s.rows = 0; }), "empty matrix"},
      {"stride", with([](auto& s) { s.row_stride_bytes = 168; }), "multiple of 16"},
      {"overlap", with([](auto& s) { s.row_stride_bytes = 128; }), "overlap"},
      {"box", with([](auto& s) { s.box_rows = 257; }), "1 to 256"},
      {"box_row_bytes", with([](auto& s) { s.box_cols = 4; s.swizzle = 0; }), "multiple of 16 bytes"},
      {"wider_than_swizzle", with([](auto& s) { s.swizzle = 64; }), "wider than its 64-byte swizzle"},
  };
  for (const Bad& c : cases) {
    const auto why = why_bad_tensor_map(c.spec);
    ASSERT_TRUE(why) << c.label;
    EXPECT_NE(why->find(c.says), std::string::npos) << c.label << ": " << *why;
    EXPECT_EQ(why->find('\n'), std::string::npos) << c.label;
  }
  // The emulated sm_90a refuses the same; a target without a TMA unit has no tensor maps.
  auto sm90 = EmuDevice::create(target("sm_90a"), {});
  ASSERT_TRUE(sm90);
  TensorMap m;
  auto refused = (*sm90)->encode_tensor_map(cases[2].spec, std::as_writable_bytes(std::span(m.bytes)));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, Errc::invalid_input);
  auto amd = EmuDevice::create(target("gfx942"), {});
  ASSERT_TRUE(amd);
  auto none = (*amd)->encode_tensor_map(ok, std::as_writable_bytes(std::span(m.bytes)));
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("no tensor maps"), std::string::npos) << none.error().message;
}

}  // namespace
}  // namespace ft::emu::test
