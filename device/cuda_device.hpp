#pragma once
// The CUDA driver API behind ft::Device, opened with dlopen("libcuda.so.1") so
// the binary runs (and says why) on machines without an NVIDIA driver.
//
// Semantics shared with the HIP backend:
// - every call runs in the device's primary context, made current on the
//   calling thread when needed;
// - copies and memsets are queued on the given stream (null: the legacy
//   default stream); copy_to_host returns once the bytes are on the host;
//   copy_to_device may return before the copy lands, but the host buffer can
//   be reused at once (pageable memory is staged by the driver);
// - created streams synchronise with the default stream (CU_STREAM_DEFAULT);
// - stream capture uses the thread-local mode and needs a created stream.
//
// FLYTUNE_LIBCUDA names the driver library to open instead of libcuda.so.1.
#include <memory>
#include <string>

#include "base/error.hpp"
#include "device/device.hpp"

namespace ft {

// What the CUDA driver reports here: library, driver version, every GPU
// (queried without creating a context), or why there is none:
// "libcuda.so.1 not found (no NVIDIA driver)", "no NVIDIA GPU found".
RuntimeReport probe_cuda();

// Opens GPU `ordinal` (retains its primary context). Errc::no_device when the
// driver or the GPU is missing, Errc::device when a driver call fails.
Result<std::unique_ptr<Device>> open_cuda_device(int ordinal);

// Compute capability -> flytune target name: 9.0 -> "sm_90a" (the
// architecture-specific feature set wgmma and TMA need, from 9.0 on), 8.9 -> "sm_89".
std::string cuda_target_name(int major, int minor);

// The driver API version number as text: 13000 -> "13.0", 12080 -> "12.8".
std::string cuda_version_text(int version);

}  // namespace ft
