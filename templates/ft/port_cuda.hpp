#pragma once
// CUDA flavour (NVRTC or nvcc), for sm_90a. Uses only built-in CUDA names.
#define FT_FLAVOUR_CUDA 1
#define FT_DEVICE __device__ __forceinline__
#define FT_HOST_DEVICE __host__ __device__ __forceinline__
// NVRTC has memcpy built in but not __builtin_memcpy.
#define FT_MEMCPY(dst, src, bytes) memcpy(dst, src, bytes)
// One access (LDG/STG.16/32/64/128); both sides aligned to the size, register
// arrays too (alignas at the caller). __builtin_assume_aligned does not survive NVVM.
#define FT_MEMCPY_ALIGNED(dst, src, bytes) ::ft::copy_words<bytes>(dst, src)
#define FT_KERNEL(threads, name) extern "C" __global__ void __launch_bounds__(threads) name
// A kernel parameter read in place: a tensor map inside it has a parameter-space address the TMA
// unit may read (sm_90a: __grid_constant__; taking a by-value parameter's address otherwise copies it to the stack).
#define FT_GRID_CONSTANT const __grid_constant__
// A kernel whose warpgroups move registers between them (setmaxnreg, Hopper
// GEMM with wgmma_regs=rebalance): one block per SM, so ptxas caps the
// entry count at the register file over the block's threads and honours the
// per-role counts after setmaxnreg.
#define FT_KERNEL_REBALANCED(threads, name) extern "C" __global__ void __launch_bounds__(threads, 1) name

#include "ft/int_types.hpp"
#include "ft/tensor_map.hpp"

namespace ft {

#if !defined(FT_WAVE_SIZE)
#error "port_cuda.hpp: define FT_WAVE_SIZE to the target's warp size (the compile of a unit passes Target::template_defines)"
#endif
inline constexpr int kWaveSize = FT_WAVE_SIZE;  // the target row's wave_size (generator/targets.def)
#define FT_UNROLL _Pragma("unroll")

// 16 bytes, the unit of every global and shared copy (LDG.128 / STS.128).
using Chunk16 = uint4;
FT_DEVICE Chunk16 zero_chunk() { return make_uint4(0u, 0u, 0u, 0u); }

// numeric.hpp's OCP e4m3 encoding in one instruction (sm_89 and later): round to
// nearest even, saturate finite values and infinities to +-448, NaN -> 0x7f, the
// sign of zero kept -- the encoder's rule, compared with it on the H200 by
// tests/gpu/atom_crosscheck_test.cpp. The pair's high byte (0) is dropped.
#define FT_HW_E4M3_ENCODE 1
FT_DEVICE u8 hw_f32_to_e4m3(float f) {
  unsigned short pair;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(f));
  return u8(pair & 0xffu);
}

template <unsigned B>
FT_DEVICE void copy_words(void* dst, const void* src) {
  static_assert(B == 2 || B == 4 || B == 8 || B == 16, "copy_words: 2, 4, 8 or 16 bytes");
  if constexpr (B == 16) *static_cast<uint4*>(dst) = *static_cast<const uint4*>(src);
  else if constexpr (B == 8) *static_cast<uint2*>(dst) = *static_cast<const uint2*>(src);
  else if constexpr (B == 4) *static_cast<unsigned*>(dst) = *static_cast<const unsigned*>(src);
  else *static_cast<unsigned short*>(dst) = *static_cast<const unsigned short*>(src);
}

FT_DEVICE int thread_index() { return int(threadIdx.x); }
FT_DEVICE int block_index_x() { return int(blockIdx.x); }
FT_DEVICE int block_index_y() { return int(blockIdx.y); }
FT_DEVICE int block_index_z() { return int(blockIdx.z); }

FT_DEVICE void barrier() { __syncthreads(); }

extern "C" __shared__ __align__(16) unsigned char ft_dynamic_smem[];
FT_DEVICE unsigned char* shared_memory() { return ft_dynamic_smem; }

FT_DEVICE float atomic_add(float* p, float v) { return atomicAdd(p, v); }
FT_DEVICE int atomic_add(int* p, int v) { return atomicAdd(p, v); }
FT_DEVICE void fence_device() { __threadfence(); }
FT_DEVICE float load_coherent(const float* p) { return __ldcg(p); }
// An acquire load at device scope: what the writer fenced before the value it reads is visible after.
FT_DEVICE int load_acquire(const int* p) {
  int v;
  asm volatile("ld.acquire.gpu.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
// The body of a spin wait: let the SM's other warps issue.
FT_DEVICE void spin_pause() { __nanosleep(64); }

FT_DEVICE float exp_f32(float x) { return __expf(x); }

// Two adjacent elements at once (p 4- / 8-byte aligned): the epilogues of
// atoms whose lanes hold column pairs.
FT_DEVICE void store_pair(u16* p, u16 a, u16 b) { *reinterpret_cast<u32*>(p) = u32(a) | (u32(b) << 16); }
FT_DEVICE void store_pair(float* p, float a, float b) { *reinterpret_cast<float2*>(p) = make_float2(a, b); }
FT_DEVICE void atomic_add_pair(float* p, float a, float b) {
  asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p), "f"(a), "f"(b) : "memory");
}

// Asynchronous global -> shared copies and the shared-memory address space,
// used by the Hopper GEMM (wgmma_gemm.hpp) only.
FT_DEVICE u32 shared_address(const void* p) { return u32(__cvta_generic_to_shared(p)); }
// Copies 16 bytes, or writes 16 zero bytes when !valid (src is then not read).
FT_DEVICE void copy_async_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
}
FT_DEVICE void copy_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N committed copy groups of this thread are pending.
template <int N>
FT_DEVICE void copy_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
// Shared-memory barriers (mbarrier, 8 bytes each): arrivals complete a phase,
// waits name the parity of the phase they wait for.
FT_DEVICE void mbarrier_init(u64* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(bar)), "r"(count) : "memory");
}
FT_DEVICE void mbarrier_arrive(u64* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// Returns once the phase of parity `parity` has completed (acquire: what the
// arriving threads wrote before arriving is visible after). The retry loop is
// inside the asm: a C++ loop here let the compiler move wgmma accumulators
// between registers while a wgmma was in flight, which ptxas answers by
// serialising every wgmma (its warning C7515).
FT_DEVICE void mbarrier_wait(u64* bar, int parity) {
  asm volatile(
      "{\n.reg .pred done;\nft_mbarrier_retry:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra ft_mbarrier_retry;\n}\n" ::"r"(shared_address(bar)),
      "r"(parity)
      : "memory");
}
// Makes this thread's shared-memory writes visible to the async proxy (wgmma).
FT_DEVICE void fence_async_proxy() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// An arrival that also expects `bytes` more of bulk copies: the phase completes
// once every arrival is in and that many bytes have landed.
FT_DEVICE void mbarrier_arrive_expect_tx(u64* bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(bar)), "r"(bytes)
               : "memory");
}
// An arrival on `bar` made when this thread's earlier cp.async copies have
// landed; counted among the barrier's expected arrivals (.noinc).
FT_DEVICE void copy_async_arrive(u64* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(shared_address(bar)) : "memory");
}
// Ends this thread now. A producer warpgroup leaves this way so that the
// compiler sees no path from its lean register budget into the epilogue.
FT_DEVICE void producer_exit() {
  asm volatile("exit;\n" ::: "memory");
  __builtin_unreachable();
}
// Registers per lane of the calling warpgroup from here on (setmaxnreg;
// sm_90a, N a multiple of 8 in 24..256, every lane of the warpgroup calls it):
// a producer warpgroup gives registers back, the consumers take them.
template <int N>
FT_DEVICE void registers_decrease() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
FT_DEVICE void registers_increase() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}
// One bulk copy (the TMA unit, no tensor map) of `bytes` contiguous bytes,
// global -> shared, counted off `bar`'s expected bytes when it lands. Both
// addresses 16-byte aligned, bytes a multiple of 16.
FT_DEVICE void bulk_copy(void* dst, const void* src, u32 bytes, u64* bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   shared_address(dst)),
               "l"(src), "r"(bytes), "r"(shared_address(bar))
               : "memory");
}

// Tensor-map copies (tensor_map.hpp; the map in the kernel's parameter space
// or global memory, 64-byte aligned). A box at element (col, row) lands in
// `dst` with the map's swizzle, elements outside the matrix as zeros, counted
// off `bar`'s expected bytes (the whole box) when it lands.
FT_DEVICE void tensor_load_2d(void* dst, const TensorMap* map, int col, int row, u64* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          shared_address(dst)),
      "l"(map), "r"(col), "r"(row), "r"(shared_address(bar))
      : "memory");
}
// The box in `src` (laid out as a load leaves it) into the matrix, elements
// outside it not written. The threads that wrote `src` fence_async_proxy()
// and meet at a barrier first; one thread issues the store, then
// tensor_store_commit() and, before `src` is written again,
// tensor_store_wait_read<0>().
FT_DEVICE void tensor_store_2d(const TensorMap* map, int col, int row, const void* src) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];\n" ::"l"(map), "r"(col),
               "r"(row), "r"(shared_address(src))
               : "memory");
}
FT_DEVICE void tensor_store_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until at most N committed store groups of this thread still read shared memory.
template <int N>
FT_DEVICE void tensor_store_wait_read() {
  asm volatile("cp.async.bulk.wait_group.read %0;\n" ::"n"(N) : "memory");
}

}  // namespace ft
