#pragma once
// Runs one kernel launch of an emulated library: every block of the grid as a
// set of lane fibers on one OS thread (blocks spread over a few threads), with
// the block barrier, the wave exchange and the block's LDS that the kernels
// reach through port_emu.hpp.
#include <cstddef>
#include <string>

#include "base/error.hpp"
#include "emulate/fiber.hpp"

namespace ft::emu {

struct GridLaunch {
  std::string kernel;                    // for messages
  void (*entry)(const void* args) = nullptr;  // NAME__ft_emu_entry
  const void* args = nullptr;            // the argument struct's bytes
  unsigned grid[3] = {1, 1, 1};
  int block_threads = 1;
  int dynamic_lds = 0;                   // bytes of the block's LDS buffer
  int workers = 1;                       // OS threads running blocks (1: in order, on the caller's thread)
  // Blocks each worker keeps in flight at once, switching between them after
  // bursts of lane steps of seeded random length: with one worker, one
  // interleaving of the blocks, the same on every run of a seed (tests of
  // synchronisation between blocks). 0 or 1: a block runs to its end first.
  int interleave = 0;
  unsigned long long schedule_seed = 0;
  FiberSwitch fibers = FiberSwitch::fast;
  std::size_t lane_stack_bytes = 128 * 1024;
};

// Errors: Errc::device with "barrier divergence in <kernel>: block (x,y,z): ..."
// when the lanes of a block cannot all continue (some wait at a barrier or a
// wave exchange that others never reach), or a misuse of the wave exchange.
Status run_grid(const GridLaunch& launch);

// The table library code calls back into (bound through ft_emu_bind).
const struct Runtime* runtime_table();

}  // namespace ft::emu
