#include "emulate/fiber.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#if defined(__x86_64__)
// void ft_emu_fiber_switch(void** save_sp, void* load_sp): pushes the registers
// the SysV ABI makes callee-saved (and the x87/SSE control words), stores the
// stack pointer, loads the other one and pops in reverse.
// ft_emu_fiber_start: the first "return" of a prepared fiber lands here, with
// the function in r13 and its argument in r12.
asm(R"(
  .text
  .p2align 4
  .globl ft_emu_fiber_switch
  .hidden ft_emu_fiber_switch
  .type ft_emu_fiber_switch, @function
ft_emu_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  fldcw (%rsp)
  ldmxcsr 8(%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size ft_emu_fiber_switch, .-ft_emu_fiber_switch

  .p2align 4
  .globl ft_emu_fiber_start
  .hidden ft_emu_fiber_start
  .type ft_emu_fiber_start, @function
ft_emu_fiber_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size ft_emu_fiber_start, .-ft_emu_fiber_start
)");
extern "C" void ft_emu_fiber_switch(void** save_sp, void* load_sp);
extern "C" void ft_emu_fiber_start();
#endif

namespace ft::emu {

FiberStack::~FiberStack() {
  if (base_) munmap(base_, size_);
}

FiberStack::FiberStack(FiberStack&& o) noexcept
    : base_(std::exchange(o.base_, nullptr)), size_(std::exchange(o.size_, 0)), guard_(std::exchange(o.guard_, 0)) {}

FiberStack& FiberStack::operator=(FiberStack&& o) noexcept {
  if (this != &o) {
    if (base_) munmap(base_, size_);
    base_ = std::exchange(o.base_, nullptr);
    size_ = std::exchange(o.size_, 0);
    guard_ = std::exchange(o.guard_, 0);
  }
  return *this;
}

Result<FiberStack> FiberStack::allocate(std::size_t usable_bytes) {
  const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  const std::size_t usable = (usable_bytes + page - 1) / page * page;
  FiberStack s;
  s.size_ = usable + page;
  s.guard_ = page;
  s.base_ = mmap(nullptr, s.size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s.base_ == MAP_FAILED) {
    s.base_ = nullptr;
    return fail(Errc::internal, fmt::format("cannot map a {}-byte lane stack: {}", s.size_, std::strerror(errno)));
  }
  if (mprotect(s.base_, page, PROT_NONE) != 0)
    return fail(Errc::internal, fmt::format("cannot protect a lane stack's guard page: {}", std::strerror(errno)));
  return s;
}

bool fast_fiber_switch_available() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

namespace {

// makecontext passes int arguments only: the context's address in two halves.
void ucontext_start(unsigned lo, unsigned hi) {
  auto* ctx = reinterpret_cast<FiberContext*>((std::uintptr_t(hi) << 32) | std::uintptr_t(lo));
  ctx->fn(ctx->arg);
  std::abort();  // fn switches away for good; reaching here is a runtime bug
}

}  // namespace

void fiber_prepare(FiberContext& ctx, const FiberStack& stack, void (*fn)(void*), void* arg, FiberSwitch how) {
  ctx.fn = fn;
  ctx.arg = arg;
#if defined(__x86_64__)
  if (how == FiberSwitch::fast) {
    // The frame ft_emu_fiber_switch pops: control words, r15..r12, rbx, rbp,
    // return address. The stack is 16-byte aligned at the call in fiber_start.
    auto top = reinterpret_cast<std::uintptr_t>(stack.top()) & ~std::uintptr_t(15);
    auto* frame = reinterpret_cast<std::uint64_t*>(top - 88);
    std::memset(frame, 0, 88);
    frame[0] = 0x037f;  // x87 control word: default precision and masks
    frame[1] = 0x1f80;  // MXCSR: all exceptions masked, round to nearest
    frame[5] = reinterpret_cast<std::uint64_t>(arg);  // r12
    frame[4] = reinterpret_cast<std::uint64_t>(fn);   // r13
    frame[8] = reinterpret_cast<std::uint64_t>(&ft_emu_fiber_start);
    ctx.sp = frame;
    return;
  }
#endif
  (void)how;
  getcontext(&ctx.uc);
  ctx.uc.uc_stack.ss_sp = stack.bottom();
  ctx.uc.uc_stack.ss_size = stack.usable();
  ctx.uc.uc_link = nullptr;
  const auto addr = reinterpret_cast<std::uintptr_t>(&ctx);
  makecontext(&ctx.uc, reinterpret_cast<void (*)()>(&ucontext_start), 2, unsigned(addr & 0xffffffffu), unsigned(addr >> 32));
}

void fiber_switch(FiberContext& from, FiberContext& to, FiberSwitch how) {
#if defined(__x86_64__)
  if (how == FiberSwitch::fast) {
    ft_emu_fiber_switch(&from.sp, to.sp);
    return;
  }
#endif
  (void)how;
  swapcontext(&from.uc, &to.uc);
}

}  // namespace ft::emu
