#pragma once
// The HIP test double's GPUs: AMD GPUs that do not exist, each an emulator
// (ft::emu::EmuDevice) of its target behind the HIP runtime's C API
// (hip_api.cpp). A code object loaded into one is the real one flytune built
// for the GPU: its AMDGPU metadata (kernel names, kernarg segment, each
// argument's offset and size, LDS, workgroup limit, wave size) is read and
// kept, each kernel is mapped to the emulator's build of the same unit (the
// support unit, or the stage variant the kernel is named after), and every
// launch is checked against the metadata before the emulator runs it.
//
// FLYTUNE_HIP_DOUBLE_GPUS: the GPUs, a comma-separated list of targets
// (default "gfx942,gfx950": an MI300X-like and an MI355X-like part).
// FLYTUNE_HIP_DOUBLE_SPACE: a --space text searched first when a stage
// kernel's variant is looked up by name (then small, default, wide).
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "compile/analyze/amdgpu_metadata.hpp"
#include "device/device.hpp"
#include "emulate/emu_device.hpp"
#include "base/error.hpp"
#include "generator/kernel_source.hpp"
#include "generator/target.hpp"

namespace ft::hip_double {

// What hipGetDeviceProperties / hipDeviceGetAttribute say of one GPU.
struct GpuModel {
  const Target* target = nullptr;
  std::string name;           // "AMD Instinct MI300X (emulated by the flytune HIP double)"
  std::string gcn_arch_name;  // "gfx942:sramecc+:xnack-"
  int compute_units = 0;
  int clock_khz = 0;
  std::size_t memory_bytes = 0;
  std::size_t l2_bytes = 0;
};

// The model of a target the double knows (gfx942, gfx950); Errc::invalid_input otherwise.
Result<GpuModel> gpu_model(std::string_view target);

// hipModuleLoadData gets no size: how far the ELF at `image` reaches (its
// headers and sections); Errc::invalid_input for what is no AMDGPU ELF.
Result<std::size_t> elf_extent(const std::byte* image);

// One kernel of a loaded code object: its metadata and its emulated build.
struct Kernel {
  AmdKernelMetadata meta;
  FunctionHandle emu;
  unsigned emu_args_size = 0;  // the emulated entry's argument struct (host sizeof)
};

struct Module {
  int gpu = 0;
  ModuleHandle emu;
  std::map<std::string, Kernel> kernels;
};

// The launch as hipModuleLaunchKernel got it.
struct LaunchRequest {
  Dim3 grid, block;
  int dynamic_lds = 0;
  void** kernel_params = nullptr;
  void** extra = nullptr;
};

// The explicit kernarg bytes of a launch, checked against the kernel's
// metadata and its emulated build; Errc::invalid_input says what disagrees.
Result<std::vector<std::byte>> kernarg_bytes(const Kernel& k, const LaunchRequest& launch);
// The launch's dimensions and LDS against the metadata and the GPU.
Status check_launch_shape(const Kernel& k, const GpuModel& gpu, const LaunchRequest& launch);

// The unit whose entry points are exactly `kernel_names`: the target's support
// unit of some dtype, or the stage variant the one kernel is named after.
Result<KernelSource> emulator_source(const Target& target, const std::vector<std::string>& kernel_names);

struct Gpu {
  GpuModel model;
  std::unique_ptr<emu::EmuDevice> emu;
};

class Double {
 public:
  // The process's double (the GPUs of FLYTUNE_HIP_DOUBLE_GPUS), made on first use.
  static Result<Double*> get();

  int count() const { return int(gpus_.size()); }
  Gpu& gpu(int i) { return *gpus_[std::size_t(i)]; }

  // Reads the code object's metadata, checks its target and wave size, builds
  // (or takes from the cache) its emulated unit and loads that.
  Result<Module*> load(int gpu, std::span<const std::byte> code_object);
  Status unload(Module* m);
  bool live(const Module* m);

 private:
  std::mutex mutex_;
  std::vector<std::unique_ptr<Gpu>> gpus_;
  std::vector<std::unique_ptr<Module>> modules_;
};

}  // namespace ft::hip_double
