#pragma once
// Shared helpers of the emulator tests: compile a unit for a target (cached in
// the build folder), load it on an emulated device, resolve entry points.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>

#include "generator/kernel_source.hpp"
#include "generator/problem.hpp"
#include "generator/target.hpp"
#include "compile/emu_compile.hpp"
#include "emulate/emu_device.hpp"

namespace ft::emu::test {

inline EmuCompileOptions compile_options() {
  EmuCompileOptions o;
  o.cache_dir = FT_EMU_TEST_CACHE;
  return o;
}

// A unit from tests/emu/units.
inline KernelSource unit_from_file(const std::string& file, std::vector<std::string> entries) {
  std::ifstream in(std::string(FT_EMU_UNITS_DIR) + "/" + file);
  std::stringstream ss;
  ss << in.rdbuf();
  return KernelSource{file, ss.str(), std::move(entries)};
}

// The emulator tests' layers: four experts, top-2, H and I as given.
inline Problem emu_problem(std::string name, DType dtype, int hidden, int inter) {
  Problem p;
  p.name = std::move(name);
  p.experts = 4;
  p.hidden = hidden;
  p.inter = inter;
  p.topk = 2;
  p.dtype = dtype;
  return p;
}

inline const Target& target(const char* name) {
  const Target* t = find_target(name);
  EXPECT_NE(t, nullptr) << name;
  return *t;
}

// An emulated device with one unit loaded.
struct Loaded {
  std::unique_ptr<EmuDevice> device;
  ModuleHandle module;
  FunctionHandle fn(const std::string& name) {
    auto f = device->function(module, name);
    EXPECT_TRUE(f) << (f ? "" : f.error().describe());
    return f ? *f : FunctionHandle{};
  }
};

inline Result<Loaded> load(const Target& t, const KernelSource& src, EmuDeviceOptions options = {}) {
  auto lib = FT_TRY(compile_emulated(src, t, compile_options()));
  Loaded l;
  l.device = FT_TRY(EmuDevice::create(t, options));
  l.module = FT_TRY(l.device->load_library(lib));
  return l;
}

}  // namespace ft::emu::test
