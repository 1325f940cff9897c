#pragma once
// HIP flavour for amdgcn, freestanding: only clang builtins, no HIP headers
// (compiles with -nogpuinc through comgr and clang).
#define FT_FLAVOUR_HIP 1
#define FT_DEVICE __attribute__((device)) inline
#define FT_HOST_DEVICE __attribute__((host, device)) inline
#define FT_MEMCPY(dst, src, bytes) __builtin_memcpy(dst, src, bytes)
#define FT_MEMCPY_ALIGNED(dst, src, bytes) \
  __builtin_memcpy(__builtin_assume_aligned(dst, bytes), __builtin_assume_aligned(src, bytes), bytes)
// Blocks always have exactly `threads` threads; saying so (min = max) lets the
// compiler use the whole register file (launch_bounds alone capped it at 128 VGPRs).
#define FT_KERNEL(threads, name) \
  extern "C" __attribute__((global)) __attribute__((amdgpu_flat_work_group_size(threads, threads))) void name
// A kernel parameter read in place (port_cuda.hpp: __grid_constant__ for tensor maps).
#define FT_GRID_CONSTANT const

#include "ft/int_types.hpp"

namespace ft {

#if !defined(FT_WAVE_SIZE)
#error "port_hip.hpp: define FT_WAVE_SIZE to the target's wave size (the compile of a unit passes Target::template_defines)"
#endif
inline constexpr int kWaveSize = FT_WAVE_SIZE;  // the target row's wave_size (generator/targets.def)
#define FT_UNROLL _Pragma("unroll")

// 16 bytes, the unit of every global and LDS copy (global_load_dwordx4). A
// vector type, not a struct, so the compiler keeps staged copies in registers.
typedef u32 Chunk16 __attribute__((ext_vector_type(4)));
FT_DEVICE Chunk16 zero_chunk() { return Chunk16{0u, 0u, 0u, 0u}; }

FT_DEVICE int thread_index() { return int(__builtin_amdgcn_workitem_id_x()); }
FT_DEVICE int block_index_x() { return int(__builtin_amdgcn_workgroup_id_x()); }
FT_DEVICE int block_index_y() { return int(__builtin_amdgcn_workgroup_id_y()); }
FT_DEVICE int block_index_z() { return int(__builtin_amdgcn_workgroup_id_z()); }

FT_DEVICE void barrier() {
  __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
  __builtin_amdgcn_s_barrier();
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

extern "C" __attribute__((shared)) __attribute__((aligned(16))) unsigned char ft_dynamic_lds[];
FT_DEVICE unsigned char* shared_memory() { return ft_dynamic_lds; }

FT_DEVICE float atomic_add(float* p, float v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
FT_DEVICE int atomic_add(int* p, int v) {
  return __hip_atomic_fetch_add(p, v, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT);
}
FT_DEVICE void fence_device() { __builtin_amdgcn_fence(__ATOMIC_SEQ_CST, "agent"); }
FT_DEVICE float load_coherent(const float* p) { return __hip_atomic_load(p, __ATOMIC_RELAXED, __HIP_MEMORY_SCOPE_AGENT); }
FT_DEVICE int load_acquire(const int* p) { return __hip_atomic_load(p, __ATOMIC_ACQUIRE, __HIP_MEMORY_SCOPE_AGENT); }
FT_DEVICE void spin_pause() { __builtin_amdgcn_s_sleep(1); }

FT_DEVICE float exp_f32(float x) { return __builtin_expf(x); }

// Column-pair epilogue helpers (the MFMA layouts hold row runs, so the
// stages do not call these on AMD; they exist so the stages compile).
FT_DEVICE void store_pair(u16* p, u16 a, u16 b) { p[0] = a; p[1] = b; }
FT_DEVICE void store_pair(float* p, float a, float b) { p[0] = a; p[1] = b; }
FT_DEVICE void atomic_add_pair(float* p, float a, float b) { atomic_add(p, a); atomic_add(p + 1, b); }

}  // namespace ft
