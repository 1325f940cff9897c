// The runtime's ABI against its past: a C caller compiled against each earlier
// flytune_runtime.h (tests/abi/headers/v1..v6, old_caller.c) runs a layer
// through today's library on the CPU emulator, its ft_layer_buffers ending at
// a page without access and the fields its header added holding poison; and
// the sized call reads exactly the bytes it is told, refusing sizes it cannot
// be and fields it does not know. (The static library these link is the very
// object files of libflytune_runtime.so.1: runtime/CMakeLists.txt.)
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include <gtest/gtest.h>

#include "flytune_runtime.h"
#include "tests/abi/old_caller.h"
#include "tests/support/forms_export.hpp"

namespace ft {
namespace {

struct OldHeader {
  int version;
  int (*run)(ft_runtime*, const char*, int, ft_abi_result*);
  std::size_t (*size)();
  std::size_t pointers;  // what its ft_layer_buffers holds
};

const OldHeader kOldHeaders[] = {
    {1, ft_abi_caller_v1, ft_abi_buffers_size_v1, 13}, {2, ft_abi_caller_v2, ft_abi_buffers_size_v2, 15},
    {3, ft_abi_caller_v3, ft_abi_buffers_size_v3, 16}, {4, ft_abi_caller_v4, ft_abi_buffers_size_v4, 18},
    {5, ft_abi_caller_v5, ft_abi_buffers_size_v5, 21}, {6, ft_abi_caller_v6, ft_abi_buffers_size_v6, 21},
};

// The emulated runtime over the recorded export, and a small T served by a
// bucket whose stages read no tiled weights (every earlier header can launch
// it) and one by a bucket that reads tiled weights (only the pointers after
// the first release's 13 can carry them).
struct Fixture {
  test::EmulatedRuntime runtime{test::forms_export().dir};
  int untiled_tokens = 0, tiled_tokens = 0;
  Fixture() {
    if (!runtime.rt) return;
    int previous = 0;
    for (int b = 0; b < ft_runtime_bucket_count(runtime.rt, 0); ++b) {
      const int bucket = ft_runtime_bucket_tokens(runtime.rt, 0, b), T = previous + 1;
      previous = bucket;
      ft_plan* plan = nullptr;
      if (ft_runtime_select(runtime.rt, ft_runtime_problem_key(runtime.rt, 0), T, &plan) != FT_OK) continue;
      const bool tiled = ft_plan_needs_tiled(plan, 1) || ft_plan_needs_tiled(plan, 2);
      int& slot = tiled ? tiled_tokens : untiled_tokens;
      if (!slot) slot = T;
      ft_plan_free(plan);
    }
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

class OldHeaders : public ::testing::TestWithParam<OldHeader> {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
    ASSERT_NE(fixture().runtime.rt, nullptr) << fixture().runtime.error;
  }
  ft_runtime* rt() { return fixture().runtime.rt; }
  std::string key() { return ft_runtime_problem_key(rt(), 0); }
};

TEST_P(OldHeaders, TheirStructIsThePointersTheyDeclared) {
  EXPECT_EQ(GetParam().size(), GetParam().pointers * sizeof(void*));
}

TEST_P(OldHeaders, ALayerThroughTheUnsizedCallMatchesTheReference) {
  ASSERT_GT(fixture().untiled_tokens, 0) << "the recorded export has no bucket without tiled weights";
  ft_abi_result r;
  GetParam().run(rt(), key().c_str(), fixture().untiled_tokens, &r);
  ASSERT_EQ(r.status, FT_OK) << "header v" << GetParam().version << ": " << r.message;
  EXPECT_LT(r.rel_l2, 1e-2) << "header v" << GetParam().version << " at T=" << fixture().untiled_tokens;
}

// The first release's 13 pointers are all the unsized call reads, so a plan
// needing a later field is refused by name, with what to do, and nothing runs.
TEST_P(OldHeaders, APlanNeedingALaterFieldIsRefusedWithTheReason) {
  ASSERT_GT(fixture().tiled_tokens, 0) << "the recorded export has no bucket with tiled weights";
  ft_abi_result r;
  GetParam().run(rt(), key().c_str(), fixture().tiled_tokens, &r);
  ASSERT_EQ(r.status, FT_ERR_ARGUMENT) << r.message;
  const std::string m = r.message;
  EXPECT_NE(m.find("_tiled"), std::string::npos) << m;
  EXPECT_NE(m.find("the caller passed ft_layer_buffers of 13 fields: a program built against an earlier flytune_runtime.h"),
            std::string::npos)
      << m;
}

INSTANTIATE_TEST_SUITE_P(Abi, OldHeaders, ::testing::ValuesIn(kOldHeaders),
                         [](const auto& info) { return "v" + std::to_string(info.param.version); });

// `bytes` bytes of an ft_layer_buffers ending where a page without access begins.
class GuardedBytes {
 public:
  explicit GuardedBytes(std::size_t bytes) : page_(std::size_t(sysconf(_SC_PAGESIZE))), bytes_(bytes) {
    open_ = (bytes + page_ - 1) / page_ * page_ + page_;  // room for the bytes, a page at least
    void* p = mmap(nullptr, open_ + page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    base_ = p == MAP_FAILED ? nullptr : static_cast<unsigned char*>(p);
    if (base_) mprotect(base_ + open_, page_, PROT_NONE);
  }
  ~GuardedBytes() {
    if (base_) munmap(base_, open_ + page_);
  }
  unsigned char* begin() { return base_ + open_ - bytes_; }
  const ft_layer_buffers* buffers() { return reinterpret_cast<const ft_layer_buffers*>(begin()); }

 private:
  std::size_t page_, bytes_, open_ = 0;
  unsigned char* base_ = nullptr;
};

TEST(GuardPage, AReadPastTheStructDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  GuardedBytes g(13 * sizeof(void*));
  ASSERT_NE(g.begin(), nullptr);
  EXPECT_DEATH(
      {
        volatile unsigned char c = g.begin()[13 * sizeof(void*)];
        (void)c;
      },
      "");
}

class SizedCall : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
    ASSERT_NE(fixture().runtime.rt, nullptr) << fixture().runtime.error;
    ASSERT_EQ(ft_runtime_select(rt(), ft_runtime_problem_key(rt(), 0), 3, &plan_), FT_OK) << ft_runtime_last_error(rt());
  }
  void TearDown() override { ft_plan_free(plan_); }
  ft_runtime* rt() { return fixture().runtime.rt; }
  std::pair<int, std::string> launch(const ft_layer_buffers* b, std::size_t bytes) {
    const int st = ft_plan_launch_sized(plan_, b, bytes, nullptr);
    return {st, ft_runtime_last_error(rt())};
  }
  ft_plan* plan_ = nullptr;
};

// Every size a struct of an earlier header had, read to its last byte and no
// further: all null here, so each call ends at the null-buffer check.
TEST_F(SizedCall, ReadsTheSizeOfEveryEarlierStructAndNoFurther) {
  for (const OldHeader& h : kOldHeaders) {
    GuardedBytes g(h.size());
    std::memset(g.begin(), 0, h.size());
    auto [st, msg] = launch(g.buffers(), h.size());
    EXPECT_EQ(st, FT_ERR_ARGUMENT) << msg;
    EXPECT_NE(msg.find("null layer buffers: x, topk_ids"), std::string::npos) << "v" << h.version << ": " << msg;
    const bool shorter = h.size() < sizeof(ft_layer_buffers);
    EXPECT_EQ(msg.find("built against an earlier flytune_runtime.h") != std::string::npos, shorter) << msg;
  }
}

TEST_F(SizedCall, RefusesASizeNoStructHas) {
  for (std::size_t bytes : {std::size_t(0), std::size_t(100), std::size_t(13 * sizeof(void*) + 4), std::size_t(4104)}) {
    GuardedBytes g(bytes);
    std::memset(g.begin(), 0, bytes);
    auto [st, msg] = launch(g.buffers(), bytes);
    EXPECT_EQ(st, FT_ERR_ARGUMENT) << bytes;
    EXPECT_NE(msg.find("ft_layer_buffers of " + std::to_string(bytes) + " bytes: not a size of this struct"),
              std::string::npos)
        << msg;
  }
}

// A newer caller's struct: fields this library does not know may be present
// when zero (the launch goes on to its own checks), and are refused when set.
TEST_F(SizedCall, ANewerCallersUnknownFieldIsRefusedWhenSet) {
  const std::size_t bytes = sizeof(ft_layer_buffers) + 2 * sizeof(void*);
  GuardedBytes g(bytes);
  std::memset(g.begin(), 0, bytes);
  auto zero = launch(g.buffers(), bytes);
  EXPECT_NE(zero.second.find("null layer buffers"), std::string::npos) << zero.second;
  g.begin()[sizeof(ft_layer_buffers) + 9] = 1;
  auto [st, msg] = launch(g.buffers(), bytes);
  EXPECT_EQ(st, FT_ERR_ARGUMENT);
  EXPECT_NE(msg.find("sets a field at byte " + std::to_string(sizeof(ft_layer_buffers) + 9) + " that this library"),
            std::string::npos)
      << msg;
}

TEST(AbiVersion, IsTheHeaders) {
  EXPECT_EQ(ft_runtime_abi_version(), std::uint32_t(FT_RUNTIME_ABI_VERSION));
  EXPECT_EQ(ft_runtime_abi_version() >> 16, std::uint32_t(FT_RUNTIME_ABI_MAJOR));
}

}  // namespace
}  // namespace ft
