#pragma once
// The emulation backend's compiler: an instantiation unit (the same one the
// GPU backends compile) built by the host C++ compiler against the EMU flavour
// of the portability header (templates/ft/port_emu.hpp) into a shared library,
// cached by content hash like the GPU code objects.
#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

#include "base/embedded_file.hpp"
#include "base/error.hpp"
#include "generator/kernel_source.hpp"
#include "generator/target.hpp"

namespace ft::emu {

struct EmuCompileOptions {
  // The host compiler; empty: $FLYTUNE_EMU_CXX, else g++, else c++ from PATH.
  std::string compiler;
  // Cache folder; empty: <default_cache_dir()>/emu; "none": build in a temporary folder.
  std::string cache_dir;
  int opt_level = 2;
  std::vector<std::string> extra_flags;  // after the defaults (part of the cache key)
  // The headers the unit includes, by path ("ft/port.hpp"); empty: the embedded templates.
  std::span<const EmbeddedFile> headers;
  std::chrono::seconds timeout{300};
};

struct EmuLibrary {
  std::string name;                      // the unit's name (KernelSource::name)
  std::string target;                    // the emulated target
  std::vector<std::string> entry_points;
  std::string compiler_version;          // first line of `<compiler> --version`
  std::string cache_key;                 // XXH3-128 hex over compiler, flags, source and headers
  std::vector<std::byte> binary;         // the shared library
  std::string log;                       // compiler diagnostics
  double compile_seconds = 0;
  bool from_cache = false;
};

// The text appended to a unit: one FT_EMU_ENTRY per entry point, so the runtime
// can call each with raw argument bytes and check their size.
std::string emulation_glue(const KernelSource& source);

// The compiler command line without input and output paths (for the cache key and logs).
std::vector<std::string> emulation_flags(const Target& target, const EmuCompileOptions& options);

// Errors: Errc::toolchain (no host compiler), Errc::compile (the compiler's first
// error line, then its log), Errc::io. Context: "<target>: <name> (emulated)".
Result<EmuLibrary> compile_emulated(const KernelSource& source, const Target& target, const EmuCompileOptions& options = {});

}  // namespace ft::emu
