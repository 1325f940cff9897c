#pragma once
// Faults and timing mutants the HIP test double can be told to produce, for
// the tests of what flytune does when an AMD GPU misbehaves.
//
// FLYTUNE_HIP_DOUBLE_FAULT="<what>@<N>[:<kernel>]": the Nth kernel launch of
// this process (counting only kernels whose name contains <kernel>, if given)
//   hang   never returns (a kernel that never ends), or
//   abort  ends the process the way ROCm does on a GPU memory fault (a line
//          "Memory access fault by GPU ..." on stderr, then SIGABRT).
// FLYTUNE_HIP_DOUBLE_FAULT_MARKER=<file>: the fault happens once: only while
// the file does not exist; the double creates it first and writes
// "<pid> <kernel>" into it, so a test knows which process faulted on what
// (the restarted worker then runs normally).
//
// FLYTUNE_HIP_DOUBLE_EVENTS="negative" or "nan": hipEventElapsedTime gives
// the negated or a NaN time (a runtime bug or events read out of order), which
// flytune's timing must refuse rather than record.
#include <string>

namespace ft::hip_double {

// Called by hipModuleLaunchKernel before the launch; returns when the launch
// is to run (the fault is elsewhere or already spent).
void before_launch(const std::string& kernel);

// The elapsed time hipEventElapsedTime reports for a measured one.
float reported_elapsed_ms(float measured);

}  // namespace ft::hip_double
