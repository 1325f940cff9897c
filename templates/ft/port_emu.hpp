#pragma once
// EMU flavour: the kernel templates compiled by the host C++ compiler
// (-DFT_EMULATE -DFT_WAVE_SIZE=64|32) into a shared library that
// tuner/emulate loads and runs. Every lane of a block is a fiber; the runtime
// switches fibers at barriers and wave exchanges, so LDS, barriers and
// cross-lane operations behave as on the GPU (and a lane that skips a barrier
// is reported, not hung). Blocks of a grid run in parallel on a few threads.
//
// The first part of this file is the binary interface between such a library
// and the runtime (plain C layout); tuner/emulate includes it alone with
// FT_EMU_ABI_ONLY defined.
namespace ft::emu {

inline constexpr unsigned kAbiVersion = 2;

// What one lane sees of its launch.
struct LaneContext {
  int thread;            // linear thread index in the block
  int block[3];          // block index in the grid (x, y, z)
  unsigned char* lds;    // the block's dynamic LDS, 16-byte aligned
};

// Services the runtime provides; bound once per loaded library (ft_emu_bind).
struct Runtime {
  unsigned abi_version;
  const LaneContext* (*current)();  // the lane running on the calling OS thread
  void (*barrier)();                // all threads of the block
  // All `lanes` lanes of the caller's wave (threads [w*lanes, (w+1)*lanes))
  // publish `bytes` from `mine`; each receives every lane's copy in `all`, in
  // lane order. A wave-level barrier on both sides.
  void (*wave_exchange)(int lanes, const void* mine, unsigned bytes, void* all);
  // Lets the other lanes of the block run (a spin wait's body); the caller
  // stays runnable.
  void (*yield)();
  // Ends the launch with `what` as its error (a wait that can never finish).
  void (*fault)(const char* what);
};

}  // namespace ft::emu

// Symbols tuner/emulate looks up in a library, for an entry point NAME:
//   NAME__ft_emu_entry(const void* args)   runs NAME with a copy of the argument struct
//   NAME__ft_emu_args_size                 sizeof the argument struct
//   NAME__ft_emu_max_threads               the launch bound FT_KERNEL declared
#define FT_EMU_ENTRY_SUFFIX "__ft_emu_entry"
#define FT_EMU_ARGS_SIZE_SUFFIX "__ft_emu_args_size"
#define FT_EMU_MAX_THREADS_SUFFIX "__ft_emu_max_threads"
#define FT_EMU_BIND_SYMBOL "ft_emu_bind"

#if !defined(FT_EMU_ABI_ONLY)

#include <atomic>
#include <thread>

#if !defined(FT_WAVE_SIZE)
#error "port_emu.hpp: define FT_WAVE_SIZE to the emulated target's wave size (Target::template_defines)"
#endif

#define FT_FLAVOUR_EMU 1
#define FT_DEVICE inline
#define FT_HOST_DEVICE inline
#define FT_MEMCPY(dst, src, bytes) __builtin_memcpy(dst, src, bytes)
#define FT_MEMCPY_ALIGNED(dst, src, bytes) ::ft::copy_aligned_checked(dst, src, bytes)
#define FT_EMU_EXPORT __attribute__((visibility("default")))
#define FT_KERNEL(threads, name)                                                  \
  extern "C" FT_EMU_EXPORT const int name##__ft_emu_max_threads = (threads);      \
  extern "C" FT_EMU_EXPORT void name
// A kernel parameter read in place (port_cuda.hpp: __grid_constant__ for tensor maps).
#define FT_GRID_CONSTANT const
#define FT_KERNEL_REBALANCED(threads, name) FT_KERNEL(threads, name)
// The compiler decides; full unrolling only slows the host compile.
#define FT_UNROLL

#include "ft/int_types.hpp"
#include "ft/tensor_map.hpp"

namespace ft {

inline constexpr int kWaveSize = FT_WAVE_SIZE;  // the target row's wave_size

// 16 bytes, the unit of every global and LDS copy.
struct alignas(16) Chunk16 {
  u32 x, y, z, w;
};
FT_DEVICE Chunk16 zero_chunk() { return Chunk16{0u, 0u, 0u, 0u}; }

namespace emu::detail {
inline const Runtime* runtime = nullptr;
inline const LaneContext& lane() { return *runtime->current(); }
}  // namespace emu::detail

FT_DEVICE int thread_index() { return emu::detail::lane().thread; }
FT_DEVICE int block_index_x() { return emu::detail::lane().block[0]; }
FT_DEVICE int block_index_y() { return emu::detail::lane().block[1]; }
FT_DEVICE int block_index_z() { return emu::detail::lane().block[2]; }

FT_DEVICE void barrier() { emu::detail::runtime->barrier(); }

FT_DEVICE unsigned char* shared_memory() { return emu::detail::lane().lds; }

// Blocks run on several OS threads: global atomics must be real atomics.
FT_DEVICE float atomic_add(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v, std::memory_order_relaxed); }
FT_DEVICE int atomic_add(int* p, int v) { return std::atomic_ref<int>(*p).fetch_add(v, std::memory_order_relaxed); }
FT_DEVICE void fence_device() { std::atomic_thread_fence(std::memory_order_seq_cst); }
FT_DEVICE float load_coherent(const float* p) {
  return std::atomic_ref<float>(*const_cast<float*>(p)).load(std::memory_order_relaxed);
}
FT_DEVICE int load_acquire(const int* p) { return std::atomic_ref<int>(*const_cast<int*>(p)).load(std::memory_order_acquire); }
// A spin wait's body: the block's other lanes run, then the OS thread lets the
// threads running other blocks (the ones the wait is for) have the core.
FT_DEVICE void spin_pause() {
  emu::detail::runtime->yield();
  std::this_thread::yield();
}

FT_DEVICE float exp_f32(float x) { return __builtin_expf(x); }

FT_DEVICE void store_pair(u16* p, u16 a, u16 b) { p[0] = a; p[1] = b; }
FT_DEVICE void store_pair(float* p, float a, float b) { p[0] = a; p[1] = b; }
FT_DEVICE void atomic_add_pair(float* p, float a, float b) { atomic_add(p, a); atomic_add(p + 1, b); }

// Shared-memory barriers (mbarrier): the arrivals still expected, the count
// each phase starts with, the parity of the completed phases, and the bytes of
// bulk copies still expected (negative when a copy landed before its
// expect_tx, as the hardware allows). Lanes run one at a time, so plain
// arithmetic is atomic here.
struct EmuMbarrier {
  u32 pending : 15, expected : 15, parity : 1, unused : 1;
  i32 tx;
};
static_assert(sizeof(EmuMbarrier) == 8, "an mbarrier is 8 bytes of shared memory");
namespace emu::detail {
inline EmuMbarrier& mbarrier(u64* bar) { return *reinterpret_cast<EmuMbarrier*>(bar); }
// A phase completes when every arrival is in and every expected byte landed.
inline void mbarrier_settle(EmuMbarrier& b) {
  if (b.pending == 0 && b.tx == 0) {
    b.pending = b.expected;
    b.parity ^= 1u;
  }
}
}  // namespace emu::detail
FT_DEVICE void mbarrier_init(u64* bar, int count) {
  emu::detail::mbarrier(bar) = EmuMbarrier{u32(count), u32(count), 0u, 0u, 0};
}
FT_DEVICE void mbarrier_arrive(u64* bar) {
  EmuMbarrier& b = emu::detail::mbarrier(bar);
  if (b.pending == 0) emu::detail::runtime->fault("an mbarrier got more arrivals than its count");
  --b.pending;
  emu::detail::mbarrier_settle(b);
}
FT_DEVICE void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  emu::detail::mbarrier(bar).tx += i32(bytes);
  mbarrier_arrive(bar);
}
// Returns once the phase of parity `parity` has completed.
FT_DEVICE void mbarrier_wait(u64* bar, int parity) {
  const EmuMbarrier& b = emu::detail::mbarrier(bar);
  for (long spins = 0; int(b.parity) == parity; ++spins) {
    if (spins == 1000000L) emu::detail::runtime->fault("an mbarrier wait never completed (arrivals missing: a deadlock)");
    emu::detail::runtime->yield();
  }
}

// The Hopper GEMM's asynchronous copies, done at issue; shared addresses are
// offsets into the block's LDS.
FT_DEVICE u32 shared_address(const void* p) {
  return u32(static_cast<const unsigned char*>(p) - emu::detail::lane().lds);
}
// FT_MEMCPY_ALIGNED: the GPU flavours assume both addresses are multiples of
// the size; here a copy that breaks the assumption faults.
FT_DEVICE void copy_aligned_checked(void* dst, const void* src, unsigned bytes) {
  if ((reinterpret_cast<unsigned long long>(dst) | reinterpret_cast<unsigned long long>(src)) % bytes != 0)
    emu::detail::runtime->fault("an aligned copy (FT_MEMCPY_ALIGNED) at an address not a multiple of its size");
  __builtin_memcpy(dst, src, bytes);
}
FT_DEVICE void copy_async_16(void* dst, const void* src, bool valid) {
  if (valid) __builtin_memcpy(dst, src, 16);
  else __builtin_memset(dst, 0, 16);
}
FT_DEVICE void copy_async_commit() {}
// A fiber cannot end mid-call: the producer returns and the stage skips its
// epilogue (holds_results()).
FT_DEVICE void producer_exit() {}
// Copies land at issue, so the arrival is made at once.
FT_DEVICE void copy_async_arrive(u64* bar) { mbarrier_arrive(bar); }
FT_DEVICE void bulk_copy(void* dst, const void* src, u32 bytes, u64* bar) {
  if ((shared_address(dst) | u32(reinterpret_cast<unsigned long long>(src)) | bytes) % 16 != 0)
    emu::detail::runtime->fault("a bulk copy with an address or size not a multiple of 16 bytes");
  __builtin_memcpy(dst, src, bytes);
  EmuMbarrier& b = emu::detail::mbarrier(bar);
  b.tx -= i32(bytes);
  emu::detail::mbarrier_settle(b);
}
// Tensor-map copies (tensor_map.hpp), done at issue like the bulk copy: the
// box at element (col, row) of the map's matrix, row by row into `dst` with
// the map's swizzle; elements outside the matrix land as zeros and still count
// toward `bar`'s bytes, as the TMA unit counts the whole box.
namespace emu::detail {
inline const TensorMapEmu& tensor_map(const TensorMap* map, unsigned char* dst) {
  const TensorMapEmu& m = *reinterpret_cast<const TensorMapEmu*>(map->bytes);
  if (m.magic != kTensorMapEmuMagic) runtime->fault("a tensor map the emulated device did not encode");
  const u32 align = m.swizzle ? 8u * m.swizzle : 128u;  // a swizzle repeats every eight of its spans
  if (u32(dst - lane().lds) % align != 0) runtime->fault("a tensor-map copy's shared address is not aligned to its swizzle");
  return m;
}
// Calls f(shared byte offset, global address or null) for each element of the box.
template <class F>
inline void each_box_element(const TensorMapEmu& m, int col, int row, F f) {
  for (u32 r = 0; r < m.box_rows; ++r)
    for (u32 c = 0; c < m.box_cols; ++c) {
      const long long gr = (long long)row + r, gc = (long long)col + c;
      const bool inside = gr >= 0 && gc >= 0 && gr < m.rows && gc < m.cols;
      const u32 at = swizzle_offset((r * m.box_cols + c) * m.elem_bytes, int(m.swizzle));
      f(at, inside ? reinterpret_cast<unsigned char*>(m.base + u64(gr) * m.row_stride_bytes + u64(gc) * m.elem_bytes) : nullptr);
    }
}
}  // namespace emu::detail
FT_DEVICE void tensor_load_2d(void* dst, const TensorMap* map, int col, int row, u64* bar) {
  unsigned char* d = static_cast<unsigned char*>(dst);
  const TensorMapEmu& m = emu::detail::tensor_map(map, d);
  emu::detail::each_box_element(m, col, row, [&](u32 at, const unsigned char* src) {
    if (src) __builtin_memcpy(d + at, src, m.elem_bytes);
    else __builtin_memset(d + at, 0, m.elem_bytes);
  });
  EmuMbarrier& b = emu::detail::mbarrier(bar);
  b.tx -= i32(m.box_rows * m.box_cols * m.elem_bytes);
  emu::detail::mbarrier_settle(b);
}
// The box from `src` (laid out as a load leaves it) into the matrix; elements
// outside the matrix are not written.
FT_DEVICE void tensor_store_2d(const TensorMap* map, int col, int row, const void* src) {
  const unsigned char* s = static_cast<const unsigned char*>(src);
  const TensorMapEmu& m = emu::detail::tensor_map(map, const_cast<unsigned char*>(s));
  emu::detail::each_box_element(m, col, row, [&](u32 at, unsigned char* g) {
    if (g) __builtin_memcpy(g, s + at, m.elem_bytes);
  });
}
// Stores are done at issue: nothing to commit or wait for.
FT_DEVICE void tensor_store_commit() {}
template <int N>
FT_DEVICE void tensor_store_wait_read() {}
template <int N>
FT_DEVICE void copy_async_wait() {}
// Lanes have no register file here: moving registers between warpgroups
// (setmaxnreg) changes nothing a lane computes.
template <int N>
FT_DEVICE void registers_decrease() {}
template <int N>
FT_DEVICE void registers_increase() {}
FT_DEVICE void fence_async_proxy() {}

namespace emu {

// The cross-lane primitive the emulated atoms (atom_emulate.hpp) are built on.
template <int Lanes>
void wave_all_gather(const void* mine, unsigned bytes, void* all) {
  static_assert(Lanes == kWaveSize, "an atom of another vendor's wave size: this atom does not exist on the emulated target");
  detail::runtime->wave_exchange(Lanes, mine, bytes, all);
}

// Calls an entry point with the argument struct copied from raw bytes; used by
// the glue tuner/emulate appends to each unit (FT_EMU_ENTRY).
template <class Args>
void call_entry(void (*entry)(Args), const void* bytes) {
  Args args;
  __builtin_memcpy(&args, bytes, sizeof args);
  entry(args);
}
template <class Args>
constexpr unsigned args_size_of(void (*)(Args)) {
  return sizeof(Args);
}

}  // namespace emu
}  // namespace ft

#define FT_EMU_ENTRY(name)                                                                              \
  extern "C" FT_EMU_EXPORT void name##__ft_emu_entry(const void* args) { ::ft::emu::call_entry(name, args); } \
  extern "C" FT_EMU_EXPORT const unsigned name##__ft_emu_args_size = ::ft::emu::args_size_of(name);

// Binds the runtime; returns the ABI version this library was built with.
extern "C" FT_EMU_EXPORT __attribute__((used)) inline unsigned ft_emu_bind(const ft::emu::Runtime* runtime) {
  ft::emu::detail::runtime = runtime;
  return ft::emu::kAbiVersion;
}

#endif  // !FT_EMU_ABI_ONLY
