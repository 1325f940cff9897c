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
// runtime, a test): a table indexed by Role, a null handle where none was
// loaded. A new role is a slot here without a line of its own.
struct RoleKernels {
  std::array<FunctionHandle, kRoleCount> by_role{};

  FunctionHandle& of(Role r) { return by_role[std::size_t(r)]; }
  FunctionHandle of(Role r) const { return by_role[std::size_t(r)]; }
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
