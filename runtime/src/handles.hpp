#pragma once
// C++ entry points over the C API handles (flytune_runtime.h) for flytune's own
// bindings (the Python package, python/src/), exported from
// libflytune_runtime.so beside the C API and not part of it. They follow its
// conventions: an ft_status return, the message in ft_runtime_last_error.
#include <memory>
#include <string>

#include "runtime/include/flytune_runtime.h"
#include "device/device.hpp"

namespace ft::rt {

// ft_runtime_open without a device: every check that needs no GPU (manifest,
// files, hashes). Problems, buckets, ft_runtime_select, ft_plan_workspace and
// ft_plan_needs_* answer as on a GPU; launches and device calls return
// FT_ERR_DEVICE. On failure the message is in ft_runtime_last_error(NULL).
int open_without_device(const char* export_dir, ::ft_runtime** out);

// ft_runtime_open on a Device the caller made (the Python package's CPU
// emulator, flytune.load(dir, device="emulate")): every check of
// ft_runtime_open, then the export's code objects loaded on `device`.
// On failure the message is in ft_runtime_last_error(NULL).
int open_with_device(const char* export_dir, std::unique_ptr<Device> device, ::ft_runtime** out);

// The device a handle runs on, as a selector: "cuda:0", "hip:1", or "none".
std::string device_selector_of(const ::ft_runtime* rt);

}  // namespace ft::rt
