// The support kernels that stream a layer's activations (the reduce and
// quantise steps) move them in vector accesses: on sm_90a their PTX has no
// byte or 16-bit global loads or stores (a memcpy whose alignment NVVM cannot
// see becomes one access per byte: the 2026-12-04 profile found the reduce and
// quantise steps 3-4x slower than their bytes, templates/ft/numeric.hpp
// copy_aligned), and the e4m3 unit's quantise steps encode with the
// instruction (cvt.rn.satfinite.e4m3x2.f32) instead of the encoder's branches.
#include <string>
#include <string_view>

#include <gtest/gtest.h>

#include "generator/emitter.hpp"
#include "tests/compile/compile_test_support.hpp"

namespace ft {
namespace {

// The PTX of entry `name`: from its .entry line to the next one.
std::string_view entry_ptx(std::string_view ptx, const std::string& name) {
  const std::size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string_view::npos) return {};
  const std::size_t next = ptx.find(".entry ", at + 1);
  return ptx.substr(at, next == std::string_view::npos ? std::string_view::npos : next - at);
}

int count(std::string_view text, std::string_view what) {
  int n = 0;
  for (std::size_t at = text.find(what); at != std::string_view::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The layer's steps (not the reference kernels, which are checks, not speed).
bool streams_activations(const std::string& entry) {
  if (entry.find("_reference") != std::string::npos) return false;
  return entry.find("_reduce_") != std::string::npos || entry.find("_quantise_") != std::string::npos;
}

class SupportAccess : public ::testing::TestWithParam<DType> {};

TEST_P(SupportAccess, ReduceAndQuantiseStepsUseVectorAccesses) {
  const Target& target = *find_target("sm_90a");
  ASSERT_EQ(test::missing_toolchain(Backend::nvrtc, target), "");
  const KernelSource src = emit_support(target, GetParam());
  auto object = compile(src, target, test::compile_options_for(test::current_test_id(), Backend::nvrtc));
  ASSERT_TRUE(object) << object.error().describe();
  int checked = 0;
  for (const std::string& entry : src.entry_points) {
    if (!streams_activations(entry)) continue;
    const std::string_view ptx = entry_ptx(object->ptx, entry);
    ASSERT_FALSE(ptx.empty()) << entry << " is not in the PTX";
    ++checked;
    for (const char* narrow : {"ld.global.u8", "st.global.u8", "ld.global.u16", "st.global.u16"})
      EXPECT_EQ(count(ptx, narrow), 0) << entry << " has " << narrow;
    EXPECT_GT(count(ptx, "ld.global.v4") + count(ptx, "ld.global.v2"), 0) << entry << " has no vector load";
    EXPECT_GT(count(ptx, "st.global.v4") + count(ptx, "st.global.v2"), 0) << entry << " has no vector store";
    if (entry.find("_quantise_") != std::string::npos) {
      EXPECT_GT(count(ptx, "cvt.rn.satfinite.e4m3x2.f32"), 0) << entry << " does not encode with the instruction";
    }
  }
  // bf16 and f16 units: the three reduce entries; the e4m3 unit: those and the two quantise steps.
  EXPECT_EQ(checked, GetParam() == DType::e4m3 ? 5 : 3);
}

INSTANTIATE_TEST_SUITE_P(Sm90a, SupportAccess, ::testing::Values(DType::bf16, DType::e4m3),
                         [](const auto& info) { return std::string(to_string(info.param)); });

}  // namespace
}  // namespace ft
