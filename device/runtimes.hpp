#pragma once
// Both GPU runtimes behind one door: what each reports on this machine, and
// opening a GPU by selector.
#include <memory>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "device/device.hpp"

namespace ft {

// HIP first, then CUDA; each report says what loaded and its GPUs, or why it
// has none. Never fails; takes tens of milliseconds where the libraries exist.
std::vector<RuntimeReport> probe_runtimes();

// selector: "cuda:N", "hip:N", "cuda" / "hip" (ordinal 0), or "" for the first
// GPU found (HIP first) -- the first whose arch is `prefer_arch` where one is
// (an export for gfx950 on a machine whose hip:0 is a gfx942), else the first.
// No GPU -> Errc::no_device with one line saying why for each runtime; a
// malformed selector -> Errc::usage.
Result<std::unique_ptr<Device>> open_device(std::string_view selector, std::string_view prefer_arch = {});

// The selector's form checked without opening anything: Errc::usage, with the
// same message open_device gives, for a malformed one.
Status check_device_selector(std::string_view selector);

// "cuda:0" for a device; what open_device accepts back.
std::string device_selector(const DeviceInfo& d);

}  // namespace ft
