#pragma once
// Fibers for the emulator's lanes: a stack each (with a guard page, so an
// overflow faults instead of corrupting a neighbour) and a switch that saves
// only what the C ABI says a call preserves. On x86-64 the switch is a few
// instructions of assembly; elsewhere, and on request, ucontext (which makes a
// signal-mask system call per switch, so it is much slower).
#include <cstddef>
#include <memory>

#include <ucontext.h>

#include "base/error.hpp"

namespace ft::emu {

class FiberStack {
 public:
  FiberStack() = default;
  ~FiberStack();
  FiberStack(FiberStack&& o) noexcept;
  FiberStack& operator=(FiberStack&& o) noexcept;
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;

  // `usable_bytes` rounded up to whole pages, plus one guard page below.
  static Result<FiberStack> allocate(std::size_t usable_bytes);
  void* top() const { return static_cast<char*>(base_) + size_; }
  void* bottom() const { return static_cast<char*>(base_) + guard_; }
  std::size_t usable() const { return size_ - guard_; }

 private:
  void* base_ = nullptr;
  std::size_t size_ = 0;   // mapping size, guard included
  std::size_t guard_ = 0;
};

enum class FiberSwitch { fast, ucontext };

// The fast switch exists on this build's architecture.
bool fast_fiber_switch_available();

// A saved execution context: the scheduler's own or one lane's.
struct FiberContext {
  void* sp = nullptr;  // fast switch: the saved stack pointer
  ucontext_t uc{};     // ucontext switch
  void (*fn)(void*) = nullptr;  // what a prepared context starts with
  void* arg = nullptr;
};

// Prepares `ctx` to run fn(arg) on `stack` when first switched to. fn must
// never return (it switches away for the last time instead).
void fiber_prepare(FiberContext& ctx, const FiberStack& stack, void (*fn)(void*), void* arg, FiberSwitch how);

// Saves the current context into `from` and resumes `to`.
void fiber_switch(FiberContext& from, FiberContext& to, FiberSwitch how);

}  // namespace ft::emu
