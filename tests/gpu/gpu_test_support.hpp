#pragma once
// Shared by the GPU tests: the skip reason, NVRTC (opened with dlopen) for
// test kernels, and checks both runtimes must pass.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nvrtc.h>

#include <fmt/format.h>

#include "device/device.hpp"
#include "system/dynlib.hpp"

namespace ft::test {

// "cuda: libcuda.so.1 not found (no NVIDIA driver)", or with the runtime's words.
inline std::string no_gpu_reason(const RuntimeReport& r) {
  return r.detail.empty() ? fmt::format("{}: {}", r.runtime, r.problem)
                          : fmt::format("{}: {} ({})", r.runtime, r.problem, r.detail);
}

// Compiles CUDA source to a cubin for `arch` ("sm_90a") with NVRTC.
inline Result<std::vector<std::byte>> nvrtc_compile(const std::string& source, const std::string& arch) {
  auto lib = DynLib::open({"libnvrtc.so.13", "libnvrtc.so.12", "/usr/local/cuda/lib64/libnvrtc.so.13",
                           "/usr/local/cuda/lib64/libnvrtc.so.12"},
                          "NVRTC (libnvrtc)");
  if (!lib) return std::unexpected(lib.error());
  decltype(&::nvrtcCreateProgram) create = nullptr;
  decltype(&::nvrtcCompileProgram) compile = nullptr;
  decltype(&::nvrtcGetProgramLogSize) log_size = nullptr;
  decltype(&::nvrtcGetProgramLog) get_log = nullptr;
  decltype(&::nvrtcGetCUBINSize) cubin_size = nullptr;
  decltype(&::nvrtcGetCUBIN) get_cubin = nullptr;
  decltype(&::nvrtcDestroyProgram) destroy = nullptr;
  decltype(&::nvrtcGetErrorString) error_string = nullptr;
  if (!lib->bind(create, "nvrtcCreateProgram") || !lib->bind(compile, "nvrtcCompileProgram") ||
      !lib->bind(log_size, "nvrtcGetProgramLogSize") || !lib->bind(get_log, "nvrtcGetProgramLog") ||
      !lib->bind(cubin_size, "nvrtcGetCUBINSize") || !lib->bind(get_cubin, "nvrtcGetCUBIN") ||
      !lib->bind(destroy, "nvrtcDestroyProgram") || !lib->bind(error_string, "nvrtcGetErrorString"))
    return fail(Errc::toolchain, lib->path() + " lacks the NVRTC cubin functions");
  nvrtcProgram prog = nullptr;
  if (nvrtcResult r = create(&prog, source.c_str(), "ft_gpu_test.cu", 0, nullptr, nullptr); r != NVRTC_SUCCESS)
    return fail(Errc::compile, fmt::format("nvrtcCreateProgram failed: {}", error_string(r)));
  std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str(), "--std=c++17"};
  nvrtcResult compiled = compile(prog, 2, options);
  std::size_t n = 0;
  log_size(prog, &n);
  std::string log(n, '\0');
  if (n) get_log(prog, log.data());
  std::vector<std::byte> cubin;
  if (compiled == NVRTC_SUCCESS && cubin_size(prog, &n) == NVRTC_SUCCESS) {
    cubin.resize(n);
    get_cubin(prog, reinterpret_cast<char*>(cubin.data()));
  }
  destroy(&prog);
  if (compiled != NVRTC_SUCCESS)
    return fail(Errc::compile, fmt::format("nvrtcCompileProgram failed: {}: {}", error_string(compiled), log));
  return cubin;
}

// alloc, copies both ways and device to device, memset: every byte checked.
inline void check_copies_and_memset(Device& dev) {
  constexpr std::size_t n = 1 << 20;
  std::vector<std::uint32_t> host(n), back(n, 0);
  for (std::size_t i = 0; i < n; ++i) host[i] = std::uint32_t(i * 2654435761u);
  auto a = dev.alloc(n * 4);
  auto b = dev.alloc(n * 4);
  ASSERT_TRUE(a && b) << (a ? b.error().describe() : a.error().describe());
  ASSERT_TRUE(dev.copy_to_device(*a, host.data(), n * 4)) << "copy_to_device";
  ASSERT_TRUE(dev.copy_device(*b, *a, n * 4)) << "copy_device";
  ASSERT_TRUE(dev.copy_to_host(back.data(), *b, n * 4)) << "copy_to_host";
  EXPECT_EQ(back, host);
  // Part of the buffer only: the rest must keep its contents.
  ASSERT_TRUE(dev.memset_u32(*b + 4 * 1000, 0xDEADBEEFu, 5000));
  ASSERT_TRUE(dev.copy_to_host(back.data(), *b, n * 4));
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t want = (i >= 1000 && i < 6000) ? 0xDEADBEEFu : host[i];
    if (back[i] != want) {
      ADD_FAILURE() << "word " << i << ": " << back[i] << " != " << want;
      break;
    }
  }
  EXPECT_TRUE(dev.free(*a));
  EXPECT_TRUE(dev.free(*b));
}

}  // namespace ft::test
