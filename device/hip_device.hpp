#pragma once
// The HIP runtime behind ft::Device, opened with dlopen (libamdhip64.so.6,
// then .so.5; /opt/rocm/lib too), so the binary runs without ROCm and says why.
// Same semantics as the CUDA backend (see cuda_device.hpp); differences:
// - the device is made current with hipSetDevice;
// - set_dynamic_shared only checks the size: AMD GPUs need no opt-in for LDS
//   up to the per-block limit, and HIP has no per-function attribute for
//   functions loaded from a module.
//
// On a machine with the library but no AMD GPU the probe reports "no AMD GPU
// found" with what hipGetDeviceCount said; it takes about 50 ms there (most of
// it is loading the library) and prints nothing.
//
// FLYTUNE_LIBHIP names the library to open instead.
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "device/device.hpp"

namespace ft {

RuntimeReport probe_hip();

// Errc::no_device when the runtime or the GPU is missing.
Result<std::unique_ptr<Device>> open_hip_device(int ordinal);

// gcnArchName -> flytune target name: "gfx942:sramecc+:xnack-" -> "gfx942".
std::string hip_target_name(std::string_view gcn_arch_name);

// HIP_VERSION-style number as text: 50221153 -> "5.2.21153", 60443483 -> "6.4.43483".
std::string hip_version_text(int version);

// hipDeviceProp_t is laid out differently by ROCm 5 and ROCm 6 (and is filled
// by differently named functions); rather than trust either layout, the
// properties are read into a generous buffer and gcnArchName is found as the
// string that starts with "gfx". Empty when there is none.
std::string find_gcn_arch_name(std::span<const std::byte> device_properties);

}  // namespace ft
