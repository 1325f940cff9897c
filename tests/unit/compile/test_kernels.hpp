#pragma once
// Small real kernels and header sets for the compile and analyze tests: one
// header with a templated matrix-instruction helper per vendor, and
// instantiation units that include it the way emitted variants include the
// kernel templates.
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/embedded_file.hpp"
#include "generator/target.hpp"
#include "compile/compile.hpp"
#include "compile/toolchain/toolchains.hpp"

namespace ft::test {

// AMD: freestanding HIP (no HIP headers, -nogpuinc).
inline constexpr std::string_view kAmdPort = R"(#pragma once
#define FT_GLOBAL extern "C" __attribute__((global))
#define FT_DEVICE __attribute__((device)) inline
#define FT_SHARED __attribute__((shared))
typedef short ft_bf16x4 __attribute__((ext_vector_type(4)));
typedef float ft_f32x4 __attribute__((ext_vector_type(4)));
FT_DEVICE int ft_lane() { return __builtin_amdgcn_workitem_id_x(); }
FT_DEVICE void ft_barrier() { __builtin_amdgcn_s_barrier(); }
)";

inline constexpr std::string_view kAmdMfma = R"(#pragma once
#include "ft/port.hpp"
namespace ft_test {
// Steps dependent MFMAs: the disassembly must show exactly Steps of them.
template <int Steps>
FT_DEVICE ft_f32x4 mfma_chain(ft_bf16x4 a, ft_bf16x4 b, ft_f32x4 acc) {
#pragma unroll
  for (int i = 0; i < Steps; ++i) acc = __builtin_amdgcn_mfma_f32_16x16x16bf16_1k(a, b, acc, 0, 0, 0);
  return acc;
}
}  // namespace ft_test
)";

inline std::vector<EmbeddedFile> amd_headers() {
  return {{"ft/port.hpp", kAmdPort}, {"ft/mfma.hpp", kAmdMfma}};
}

// A kernel with `steps` MFMAs and a __shared__ float[256] (1024 bytes of LDS).
inline KernelSource amd_mfma_kernel(const std::string& name, int steps = 4) {
  return {name,
          fmt::format(R"(#include "ft/mfma.hpp"
FT_GLOBAL void {0}(const ft_bf16x4* a, const ft_bf16x4* b, ft_f32x4* c) {{
  FT_SHARED float tile[256];
  int t = ft_lane();
  ft_f32x4 acc = {{0, 0, 0, 0}};
  acc = ft_test::mfma_chain<{1}>(a[t], b[t], acc);
  tile[t] = acc[0];
  ft_barrier();
  acc[1] += tile[(t + 1) & 255];
  c[t] = acc;
}}
)",
                      name, steps),
          {name}};
}

// Indexing a private array by a run-time value forces it into scratch memory.
inline KernelSource amd_scratch_kernel(const std::string& name) {
  return {name,
          fmt::format(R"(#include "ft/port.hpp"
FT_GLOBAL void {0}(int* out, int i, int n) {{
  volatile int private_array[64];
  for (int k = 0; k < 64; ++k) private_array[k] = k * n;
  out[ft_lane()] = private_array[i & 63];
}}
)",
                      name),
          {name}};
}

// NVIDIA: CUDA through NVRTC, mma.sync by inline PTX.
inline constexpr std::string_view kNvidiaMma = R"(#pragma once
namespace ft_test {
__device__ inline void mma_m16n8k16_bf16(float* d, const unsigned* a, const unsigned* b) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <int Steps>
__device__ inline void mma_chain(float* d, const unsigned* a, const unsigned* b) {
#pragma unroll
  for (int i = 0; i < Steps; ++i) mma_m16n8k16_bf16(d, a + 4 * i, b + 2 * i);
}
}  // namespace ft_test
)";

inline std::vector<EmbeddedFile> nvidia_headers() { return {{"ft/mma.hpp", kNvidiaMma}}; }

// `steps` mma.sync and a __shared__ float[512] (2048 bytes).
inline KernelSource nvidia_mma_kernel(const std::string& name, int steps = 3) {
  return {name,
          fmt::format(R"(#include "ft/mma.hpp"
extern "C" __global__ void {0}(const unsigned* a, const unsigned* b, float* c) {{
  __shared__ float tile[512];
  float d[4] = {{0, 0, 0, 0}};
  int i = threadIdx.x;
  ft_test::mma_chain<{1}>(d, a + 16 * i, b + 8 * i);
  tile[i] = d[0];
  __syncthreads();
  c[i] = d[1] + tile[(i + 1) & 511];
}}
)",
                      name, steps),
          {name}};
}

// Why `backend` cannot build `target` here, or empty when it can.
inline std::string missing_backend(Backend backend, std::string_view target) {
  const Toolchains& tc = toolchains();
  const Target& t = *find_target(target);
  for (Backend b : backends_for(t, tc))
    if (b == backend) return {};
  std::string why = backend == Backend::comgr   ? tc.comgr.error
                    : backend == Backend::clang ? tc.clang.error
                                                : tc.nvrtc.error;
  return fmt::format("{} cannot build {} on this machine{}{}", to_string(backend), target, why.empty() ? "" : ": ", why);
}

#define FT_REQUIRE_BACKEND(backend, target)                                        \
  do {                                                                             \
    if (auto why = ::ft::test::missing_backend(backend, target); !why.empty())     \
      GTEST_SKIP() << why;                                                         \
  } while (0)

// A fresh, empty folder removed at the end of the test.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "flytune-test-XXXXXX").string();
    path_ = mkdtemp(pattern.data()) ? pattern : "";
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline CompileOptions options_for(Backend backend, std::span<const EmbeddedFile> headers, std::string cache_dir = "none") {
  CompileOptions o;
  o.backend = backend;
  o.headers = headers;
  o.cache_dir = std::move(cache_dir);
  return o;
}

}  // namespace ft::test
