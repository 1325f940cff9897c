#pragma once
// The device a `flytune worker` measures on, named by its selector: a GPU
// ("cuda:N", "hip:N", "" for the first GPU found; device/runtimes.hpp)
// or the CPU emulator of a target ("emu:<target>" or "emu:<target>:<n>";
// tuner/emulate). This sits above both: tuner/device knows nothing of the
// emulator, which is itself a Device.
#include <memory>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "generator/target.hpp"
#include "device/device.hpp"

namespace ft {

// An emulated device: the target it emulates and which one of several
// (n tells the emulated devices of one search apart; their DeviceInfo's
// pci_bus_id is "emu:<target>:<n>").
struct EmuSelector {
  const Target* target = nullptr;
  int index = 0;
  std::string label() const;  // "emu:sm_90a:0"
};

// Whether a selector names the emulator ("emu" or "emu:..."), well-formed or not.
bool is_emu_selector(std::string_view selector);

// "emu:<target>" or "emu:<target>:<n>" (n >= 0); anything else after "emu" is
// Errc::usage, one line naming what was wrong and the form expected.
Result<EmuSelector> parse_emu_selector(std::string_view selector);

// The selector's form checked without opening anything (the worker's and the
// search's command lines): Errc::usage for a malformed one.
Status check_worker_selector(std::string_view selector);

// Opens the device a selector names: an emulator of its target, or a GPU
// through open_device(). Errc::usage for a malformed selector,
// Errc::no_device when the GPU is not there.
Result<std::unique_ptr<Device>> open_worker_device(std::string_view selector);

}  // namespace ft
