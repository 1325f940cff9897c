#include "measure/worker/worker_device.hpp"

#include <charconv>

#include <fmt/format.h>

#include "device/runtimes.hpp"
#include "emulate/emu_device.hpp"

namespace ft {
namespace {

std::string known_targets() {
  std::string out;
  for (const Target& t : all_targets()) out += (out.empty() ? "" : ", ") + std::string(t.name);
  return out;
}

Error bad_emu(std::string_view selector, std::string_view what) {
  return Error{Errc::usage,
               fmt::format("bad device '{}': {}; expected emu:<target> or emu:<target>:<n> (targets: {})", selector, what,
                           known_targets()),
               {}};
}

// The GPU selector errors of open_device() name only the GPU forms; a worker takes the emulator's too.
Error bad_any(std::string_view selector) {
  return Error{Errc::usage,
               fmt::format("bad device '{}': expected cuda:N, hip:N, emu:<target> or emu:<target>:<n>", selector), {}};
}

}  // namespace

std::string EmuSelector::label() const { return fmt::format("emu:{}:{}", target ? target->name : "?", index); }

bool is_emu_selector(std::string_view selector) { return selector == "emu" || selector.starts_with("emu:"); }

Result<EmuSelector> parse_emu_selector(std::string_view selector) {
  if (!is_emu_selector(selector)) return std::unexpected(bad_emu(selector, "not an emulator selector"));
  if (selector.size() <= 4) return std::unexpected(bad_emu(selector, "no target"));
  std::string_view rest = selector.substr(4);
  const auto colon = rest.find(':');
  const std::string_view name = rest.substr(0, colon);
  EmuSelector out;
  out.target = find_target(name);
  if (name.empty()) return std::unexpected(bad_emu(selector, "no target"));
  if (!out.target) return std::unexpected(bad_emu(selector, fmt::format("unknown target '{}'", name)));
  if (colon != std::string_view::npos) {
    const std::string_view digits = rest.substr(colon + 1);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out.index);
    if (digits.empty() || ec != std::errc{} || end != digits.data() + digits.size() || out.index < 0)
      return std::unexpected(bad_emu(selector, fmt::format("'{}' is not a device number (0, 1, ...)", digits)));
  }
  return out;
}

Status check_worker_selector(std::string_view selector) {
  if (is_emu_selector(selector)) {
    if (auto s = parse_emu_selector(selector); !s) return std::unexpected(s.error());
    return {};
  }
  if (!check_device_selector(selector)) return std::unexpected(bad_any(selector));
  return {};
}

Result<std::unique_ptr<Device>> open_worker_device(std::string_view selector) {
  if (!is_emu_selector(selector)) {
    auto d = open_device(selector);
    if (!d && d.error().code == Errc::usage) return std::unexpected(bad_any(selector));
    return d;
  }
  const EmuSelector s = FT_TRY(parse_emu_selector(selector));
  emu::EmuDeviceOptions options;
  options.index = s.index;
  auto d = FT_TRY(emu::EmuDevice::create(*s.target, options));
  return std::unique_ptr<Device>(std::move(d));
}

}  // namespace ft
