// Plan selection out of host memory, on the CPU emulator over the recorded
// export (tests/data/tiny_forms.db): this binary replaces the global operator
// new with one that can fail the n-th allocation of the calling thread (one
// allocation, as a loaded server sees it), and counts the blocks new has
// handed out and delete taken back. For each n from the first allocation
// ft_runtime_select makes to past its last: the call answers FT_ERR_INTERNAL
// ("out of host memory"), leaves *out null and keeps no block -- or, where
// the failed one was a nothrow new that its caller does without (the
// standard library's sorts fall back to sorting in place), a plan as usual;
// the runtime then selects and launches as before. Its own binary: the replacement is program-wide.
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

#include <gtest/gtest.h>

#include "flytune_runtime.h"
#include "layer/operation.hpp"
#include "runtime/check/layer_check.hpp"
#include "runtime/src/runtime_impl.hpp"
#include "tests/support/forms_export.hpp"

namespace {

thread_local long t_fail_in = 0;       // > 0: the allocation this many from now fails
thread_local bool t_injected = false;  // one did since armed
thread_local bool t_nothrow = false;   // it was a nothrow new's (nullptr, which a caller may handle)
std::atomic<long> g_live{0};           // blocks from operator new not yet deleted

void* allocate(std::size_t n) {
  if (t_fail_in > 0 && --t_fail_in == 0) {
    t_injected = true;
    throw std::bad_alloc();
  }
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  g_live.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void release(void* p) noexcept {
  if (!p) return;
  g_live.fetch_sub(1, std::memory_order_relaxed);
  std::free(p);
}

}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  try {
    return allocate(n);
  } catch (const std::bad_alloc&) {
    t_nothrow = true;
    return nullptr;
  }
}
void* operator new[](std::size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }

namespace ft {
namespace {

TEST(HostOom, PlanSelectionOutOfHostMemoryIsAnErrorAndKeepsNothing) {
  ASSERT_TRUE(test::forms_export().error.empty()) << test::forms_export().error;
  auto opened = check::open_on_emulator(test::forms_export().dir);
  ASSERT_TRUE(opened) << opened.error().describe();
  ft_runtime* rt = *opened;
  const std::string key = ft_runtime_problem_key(rt, 0);
  // The last error is kept per thread: give it a long message first, so that
  // replacing it keeps the same number of blocks.
  ft_plan* none = nullptr;
  ASSERT_NE(ft_runtime_select(rt, "no such problem, a key long enough not to fit a short string", 5, &none), FT_OK);
  int failed = 0, handled = 0;
  for (int tokens : {5, 40}) {  // a tuned bucket's neighbour and a T between buckets
    ft_plan* normal = nullptr;
    ASSERT_EQ(ft_runtime_select(rt, key.c_str(), tokens, &normal), FT_OK) << ft_runtime_last_error(rt);
    const int bucket = ft_plan_bucket(normal);
    ft_plan_free(normal);
    bool completed = false;
    for (long n = 1; n < 100000 && !completed; ++n) {
      ft_plan* plan = reinterpret_cast<ft_plan*>(&failed);  // must come back null on failure
      const long live = g_live.load();
      t_injected = t_nothrow = false;
      t_fail_in = n;
      const int rc = ft_runtime_select(rt, key.c_str(), tokens, &plan);
      t_fail_in = 0;
      if (!t_injected || (t_nothrow && rc == FT_OK)) {  // past the call's last allocation, or one it did without
        ASSERT_EQ(rc, FT_OK) << ft_runtime_last_error(rt);
        ASSERT_NE(plan, nullptr);
        EXPECT_EQ(ft_plan_bucket(plan), bucket);
        ft_plan_free(plan);
        EXPECT_EQ(g_live.load(), live) << "blocks kept after selecting and freeing a plan (allocation " << n << ")";
        completed = !t_injected;
        handled += t_injected;
        continue;
      }
      ++failed;
      EXPECT_EQ(rc, FT_ERR_INTERNAL) << "allocation " << n << " at T=" << tokens << ": " << ft_runtime_last_error(rt);
      EXPECT_EQ(plan, nullptr) << "allocation " << n << " at T=" << tokens;
      EXPECT_NE(std::string(ft_runtime_last_error(rt)).find("out of host memory"), std::string::npos) << ft_runtime_last_error(rt);
      EXPECT_EQ(g_live.load(), live) << "blocks kept after failing allocation " << n << " at T=" << tokens;
    }
    EXPECT_TRUE(completed) << "T=" << tokens;
  }
  EXPECT_GE(failed, 2) << "selection should allocate (the plan at least)";
  std::printf("%d selections failed at an allocation, each an error keeping nothing; %d did without a nothrow allocation\n",
              failed, handled);
  // The runtime serves on: a plan selected now launches and checks right.
  ft_plan* first = nullptr;
  ASSERT_EQ(ft_runtime_select(rt, key.c_str(), 5, &first), FT_OK) << ft_runtime_last_error(rt);
  const Problem problem = rt::plan_of(first)->problem->problem;
  ft_plan_free(first);
  {
    check::ProblemWeights weights(rt, problem, 7);
    ASSERT_TRUE(weights.error().empty()) << weights.error();
    const check::CheckRow row = check::check_row(op::moe_forward(), rt, weights, key, 5, "uniform", 11);
    EXPECT_TRUE(row.passed) << row.summary;
  }
  ft_runtime_close(rt);
}

}  // namespace
}  // namespace ft
