// Backend::emulate: compile() for the CPU emulator. The same instantiation
// unit the GPU backends build, compiled by the host C++ compiler against
// port_emu.hpp (emu::compile_emulated) into a shared library that
// EmuDevice::load_module loads. It keeps its own cache of libraries
// (<cache>/emu, keyed by compiler, flags, source and headers).
#include <fmt/format.h>

#include "compile/backends.hpp"
#include "system/hash.hpp"
#include "compile/emu_compile.hpp"

namespace ft::detail {

Result<CodeObject> compile_for_emulator(const KernelSource& source, const Target& target, const CompileOptions& options) {
  emu::EmuCompileOptions eo;
  // compile_emulated takes an explicit folder as is; keep its libraries apart
  // from the GPU cache's entries, as its default (<default cache>/emu) does.
  if (options.cache_dir == "none") eo.cache_dir = "none";
  else if (!options.cache_dir.empty()) eo.cache_dir = options.cache_dir + "/emu";
  eo.opt_level = options.opt_level;
  for (const std::string& d : options.defines) eo.extra_flags.push_back("-D" + d);
  eo.extra_flags.insert(eo.extra_flags.end(), options.extra_flags.begin(), options.extra_flags.end());
  eo.headers = options.headers;
  eo.timeout = options.timeout;
  emu::EmuLibrary lib = FT_TRY(emu::compile_emulated(source, target, eo));

  CodeObject object;
  object.kernel_name = source.name;
  object.target = std::string(target.name);
  object.backend = Backend::emulate;
  object.toolchain_version = lib.compiler_version;  // the host compiler: "g++ (Debian 12.2.0-14) 12.2.0"
  object.binary = std::move(lib.binary);
  object.hash = xxh3_128_hex(object.binary);
  object.cache_key = lib.cache_key;
  object.log = std::move(lib.log);
  object.compile_seconds = lib.compile_seconds;
  object.from_cache = lib.from_cache;
  return object;
}

}  // namespace ft::detail
