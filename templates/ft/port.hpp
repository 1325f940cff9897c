#pragma once
// The portability layer every kernel template is written against. Exactly one
// flavour is selected:
//   HIP   (clang -x hip / comgr, amdgcn; freestanding: no HIP headers)  port_hip.hpp
//   CUDA  (NVRTC or nvcc, sm_90a)                                        port_cuda.hpp
//   EMU   (the host C++ compiler, -DFT_EMULATE: lanes run as threads)   port_emu.hpp
//
// What each flavour provides (kernels use nothing else from the hardware):
//   FT_DEVICE                 qualifier of device functions (inline)
//   FT_HOST_DEVICE            qualifier of constexpr helpers used on both sides
//   FT_KERNEL(threads, name)  declares an extern "C" entry point `void name` with launch bounds
//   FT_GRID_CONSTANT          qualifies a kernel parameter read in place (a tensor map's home, sm_90a)
//   ft::kWaveSize             lanes per wave / warp: FT_WAVE_SIZE, which the compile of every unit
//                             defines from the target's row (generator/targets.def, Target::template_defines)
//   ft::thread_index()        linear thread index in the (1-D) block
//   ft::block_index_x/y/z()   block index in the grid
//   ft::barrier()             block-wide barrier ordering LDS / shared and global accesses
//   ft::shared_memory()       base of the block's dynamic LDS / shared memory (16-byte aligned)
//   ft::atomic_add(float*, float), ft::atomic_add(int*, int) -> old value
//   ft::fence_device()        orders this thread's global writes before its later ones for every block
//                             (the device-scope fence of an arrival counter)
//   ft::load_coherent(const float*)  a global load that sees other blocks' fenced writes (not a stale L1 line)
//   ft::load_acquire(const int*)     an acquire load at device scope (a spin wait on another block's arrivals)
//   ft::spin_pause()                 the body of a spin wait (the block's and the device's other work runs)
//   ft::exp_f32(float)
//   ft::Chunk16, ft::zero_chunk()  a 16-byte register value (the unit of global/LDS copies)
//   FT_MEMCPY(dst, src, n)   a fixed-size copy the compiler keeps in registers
//   FT_MEMCPY_ALIGNED(dst, src, n)  the same where both addresses are multiples of n (2, 4, 8 or 16):
//                             one vector load or store (a memcpy of unknown alignment is byte
//                             copies on NVPTX); the emulator faults on a misaligned address
//   FT_UNROLL                 full-unroll hint for loops over register arrays
//   ft::store_pair(u16*|float*, a, b), ft::atomic_add_pair(float*, a, b)  two adjacent elements
//     (one 4/8-byte store, one red.v2 on CUDA), for atoms whose lanes hold column pairs
//   CUDA and EMU only (the Hopper GEMM): ft::shared_address(p), ft::copy_async_16(dst, src, valid),
//     ft::copy_async_commit(), ft::copy_async_wait<N>(), ft::fence_async_proxy(),
//     ft::mbarrier_init(u64*, count), ft::mbarrier_arrive(u64*), ft::mbarrier_wait(u64*, parity)
//   atom instruction hooks: see atom_mfma.hpp / atom_mma_sync.hpp (EMU uses atom_emulate.hpp)
#if defined(FT_EMULATE)
#include "ft/port_emu.hpp"
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
#include "ft/port_cuda.hpp"
#elif defined(__HIP__) || defined(__AMDGCN__)
#include "ft/port_hip.hpp"
#else
#error "ft/port.hpp: compile as HIP (amdgcn), CUDA (NVRTC/nvcc) or on the host with -DFT_EMULATE"
#endif

#include "ft/elem.hpp"
#include "ft/numeric.hpp"
