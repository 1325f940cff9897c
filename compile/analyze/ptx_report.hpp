#pragma once
// NVIDIA resource facts from what NVRTC returns: the ptxas -v report in the
// program log, and the instruction mix of the PTX (no SASS disassembler is
// available, so matrix instructions are counted in PTX).
#include <map>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace ft {

struct PtxasReport {
  int registers = 0;          // per thread
  int barriers = 0;
  int smem_bytes = 0;         // static shared memory
  int cmem0_bytes = 0;        // kernel parameters (constant bank 0)
  int stack_bytes = 0;        // stack frame per thread
  int spill_store_bytes = 0;
  int spill_load_bytes = 0;
  // ptxas's "wgmma.mma_async instructions are serialized ..." performance
  // warning for this entry (C7512, C7515, ...), verbatim after its code; empty
  // when none. A serialised wgmma kernel runs far below the tensor-core rate.
  std::string wgmma_serialized;
};

// The report for one entry, from lines such as
//   ptxas info    : Compiling entry function 'k' for 'sm_90a'
//   ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 18 registers, used 1 barriers, 2048 bytes smem, 368 bytes cmem[0]
// and ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async
//   instructions are serialized due to ... in the function 'k'
// Errc::not_found when the log has no report for `entry`.
Result<PtxasReport> parse_ptxas_report(std::string_view log, std::string_view entry);

struct PtxInstructionMix {
  std::map<std::string, int> matrix_ops;  // full opcode: "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
  int instructions = 0;                   // PTX instructions in the entry's body
};

// Counts the instructions of `.entry <entry>` (mma.* and wgmma.mma_async* as matrix ops).
Result<PtxInstructionMix> count_ptx_instructions(std::string_view ptx, std::string_view entry);

}  // namespace ft
