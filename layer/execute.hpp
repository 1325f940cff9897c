#pragma once
// Runs a layer program (layer/program.hpp) on any Device: the CUDA and HIP
// runtimes, the CPU emulator, or into a graph being captured. Each step is
// one memset or one launch with the program's grid, block, shared memory and
// argument scalars; the pointer fields come from a table of buffers. Nothing
// is allocated and nothing waits for the device, so the caller may capture it.
#include <array>
#include <cstddef>
#include <limits>
#include <span>
#include <vector>

#include "layer/program.hpp"
#include "device/device.hpp"

namespace ft {

// Device addresses by Buf; 0: not given.
using BufferTable = std::array<DevicePtr, kBufCount>;
inline DevicePtr& at(BufferTable& t, Buf b) { return t[std::size_t(b)]; }
inline DevicePtr at(const BufferTable& t, Buf b) { return t[std::size_t(b)]; }

// The kernel of each role, loaded by the caller (the search's bench, the
// runtime, a test).
struct RoleKernels {
  FunctionHandle align, stage1, stage2, reduce_atomic, reduce_partials, reduce_partials16;
  FunctionHandle align_count, align_scatter;  // the wide align (layer/program.hpp, AlignForm)
  FunctionHandle quantise_x, quantise_inter;  // fp8 layers' support steps
  FunctionHandle dgrad2, dgrad1, wgrad2, wgrad1;  // the backward's stages (layer/backward.hpp)

  // The member that holds a role's kernel.
  FunctionHandle& of(Role r);
  FunctionHandle of(Role r) const { return const_cast<RoleKernels*>(this)->of(r); }
};
// One function per step (a null handle for memsets); Errc::internal when a
// role the program needs has no kernel.
Result<std::vector<FunctionHandle>> bind(const LayerProgram& p, const RoleKernels& k);

// Allows each launch step's dynamic shared memory on its function (CUDA
// needs this above 48 KiB): once per loaded function, before executing or
// capturing a program with it.
Status prepare(Device& device, const LayerProgram& p, std::span<const FunctionHandle> functions);

// Errc::usage naming every buffer a step reads that the table lacks (all at
// once, so a caller fixes them in one go); bad_ids is optional.
Status check_buffers(const LayerProgram& p, const BufferTable& buffers);

struct ExecuteOptions {
  std::size_t first = 0;                                  // steps [first, last)
  std::size_t last = std::numeric_limits<std::size_t>::max();
  // Empty, or one event per step run plus one: marks[i] is recorded before the
  // i-th step run and the last one after it (per-step timing).
  std::span<const EventHandle> marks;
};

// Enqueues the steps on `stream`. The caller has checked the buffers.
Status execute(Device& device, const LayerProgram& p, std::span<const FunctionHandle> functions, const BufferTable& buffers,
               StreamHandle stream, const ExecuteOptions& options = {});

}  // namespace ft
