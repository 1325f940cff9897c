#include "compile/analyze/analyze.hpp"

#include <algorithm>

#include <fmt/format.h>

#include "compile/analyze/amdgpu_metadata.hpp"
#include "compile/analyze/elf_image.hpp"
#include "compile/analyze/llvm_disassembler.hpp"
#include "compile/analyze/objdump_disassembler.hpp"
#include "compile/analyze/ptx_report.hpp"

namespace ft {
namespace {

void add_note(std::string& notes, const std::string& note) { notes += (notes.empty() ? "" : "; ") + note; }

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// Fills occupancy and says what bounds it.
void finish_occupancy(Resources& r, const Target& t, int block_threads) {
  r.occupancy = occupancy_per_simd(t, r.regs, r.lds_bytes, block_threads);
  if (r.lds_bytes > t.lds_bytes) {
    add_note(r.notes, fmt::format("LDS {} bytes exceeds the {} limit of {}", r.lds_bytes, t.name, t.lds_bytes));
    return;
  }
  if (r.regs > t.regs_per_lane) {
    add_note(r.notes, fmt::format("{} registers exceed the {} limit of {}", r.regs, t.name, t.regs_per_lane));
    return;
  }
  int by_regs = t.occupancy_for_registers(r.regs);
  int by_lds = occupancy_per_simd(t, 0, r.lds_bytes, block_threads);
  int by_waves = occupancy_per_simd(t, 0, 0, block_threads);
  if (r.occupancy == t.max_waves_per_simd) {
    add_note(r.notes, fmt::format("occupancy {} per SIMD (the maximum)", r.occupancy));
    return;
  }
  std::string_view limit = r.occupancy == by_waves  ? "block size"
                           : r.occupancy == by_regs ? "registers"
                           : r.occupancy == by_lds  ? "LDS"
                                                    : "registers and LDS";
  add_note(r.notes, fmt::format("occupancy {} per SIMD, limited by {}", r.occupancy, limit));
}

// The instruction mix of one AMD kernel: LLVM's disassembler in process where that LLVM knows the
// target, else the llvm-objdump of the clang that builds the target (a newer LLVM: the in-process
// LLVM 19 cannot decode gfx950).
Result<InstructionMix> kernel_instruction_mix(const CodeObject& object, const Target& target, std::string_view symbol,
                                              std::string& notes) {
  auto in_process = llvm_library();
  const ClangInfo* clang = toolchains().clang_for(target.name);
  bool in_process_knows = in_process && in_process->major >= target.min_llvm_major;
  if (!in_process_knows && clang && clang->major >= target.min_llvm_major) {
    add_note(notes, fmt::format("disassembled by llvm-objdump {} ({})", clang->version,
                                in_process ? fmt::format("the in-process LLVM {} predates {}", in_process->major, target.name)
                                           : in_process.error().message));
    return disassemble_with_objdump(*clang, target, object.binary, symbol);
  }
  auto image = FT_TRY(ElfImage::parse(object.binary));
  const ElfSymbol* code = image.symbol(symbol);
  if (!code) return fail(Errc::not_found, fmt::format("no symbol '{}' in the code object", symbol), object.kernel_name);
  auto bytes = FT_TRY(image.symbol_bytes(*code));
  return disassemble_amdgpu(target, bytes, code->value);
}

Result<Resources> analyze_amd(const CodeObject& object, const Target& target, std::string_view symbol,
                              int block_threads, int dynamic_lds) {
  auto kernels = FT_TRY(read_amdgpu_metadata(object.binary));
  auto meta = std::find_if(kernels.begin(), kernels.end(), [&](const AmdKernelMetadata& k) { return k.name == symbol; });
  if (meta == kernels.end()) {
    std::string known;
    for (const auto& k : kernels) known += (known.empty() ? "" : ", ") + k.name;
    return fail(Errc::not_found, fmt::format("no kernel '{}' in the code object (it has: {})", symbol, known),
                object.kernel_name);
  }
  Resources r;
  r.regs = meta->vgpr_count;
  r.agprs = meta->agpr_count;
  r.vgprs = std::max(0, meta->vgpr_count - meta->agpr_count);
  r.sgprs = meta->sgpr_count;
  r.lds_bytes = meta->group_segment_fixed_size + dynamic_lds;
  r.scratch_bytes = meta->private_segment_fixed_size;
  r.spill_bytes = 4 * (meta->vgpr_spill_count + meta->sgpr_spill_count);
  r.spills = r.spill_bytes > 0 || r.scratch_bytes > 0 || meta->uses_dynamic_stack;
  if (meta->vgpr_spill_count || meta->sgpr_spill_count)
    add_note(r.notes, fmt::format("spills {} VGPRs and {} SGPRs", meta->vgpr_spill_count, meta->sgpr_spill_count));
  if (r.scratch_bytes) add_note(r.notes, fmt::format("scratch {} bytes per lane", r.scratch_bytes));
  if (meta->uses_dynamic_stack) add_note(r.notes, "uses a dynamic stack");

  auto mix = FT_TRY(kernel_instruction_mix(object, target, symbol, r.notes));
  r.instructions = mix.total;
  for (const auto& [mnemonic, count] : mix.mnemonics)
    if (mnemonic.starts_with("v_mfma") || mnemonic.starts_with("v_smfmac")) r.matrix_ops[mnemonic] += count;
  if (mix.undecoded) add_note(r.notes, fmt::format("{} words the disassembler could not decode", mix.undecoded));
  finish_occupancy(r, target, block_threads);
  return r;
}

Result<Resources> analyze_nvidia(const CodeObject& object, const Target& target, std::string_view symbol,
                                 int block_threads, int dynamic_lds) {
  auto report = parse_ptxas_report(object.log, symbol);
  if (!report) return std::unexpected(with_context(report.error(), object.kernel_name));
  Resources r;
  r.regs = report->registers;
  r.lds_bytes = report->smem_bytes + dynamic_lds;
  r.scratch_bytes = report->stack_bytes;
  r.spill_bytes = report->spill_store_bytes;
  r.spills = report->spill_store_bytes > 0 || report->spill_load_bytes > 0 || report->stack_bytes > 0;
  if (r.spills)
    add_note(r.notes, fmt::format("stack {} bytes, spill stores {} bytes, spill loads {} bytes", report->stack_bytes,
                                  report->spill_store_bytes, report->spill_load_bytes));
  if (!report->wgmma_serialized.empty()) {
    r.serialized_mma = true;
    add_note(r.notes, report->wgmma_serialized);
  }
  if (object.ptx.empty()) {
    add_note(r.notes, "no PTX kept, so no instruction counts");
  } else {
    auto mix = count_ptx_instructions(object.ptx, symbol);
    if (!mix) return std::unexpected(with_context(mix.error(), object.kernel_name));
    r.matrix_ops = std::move(mix->matrix_ops);
    r.instructions = mix->instructions;
    add_note(r.notes, "matrix ops and instructions counted in PTX (no SASS disassembler)");
  }
  finish_occupancy(r, target, block_threads);
  return r;
}

}  // namespace

int occupancy_per_simd(const Target& t, int regs_per_lane, int lds_bytes, int block_threads) {
  if (block_threads <= 0 || lds_bytes > t.lds_bytes) return 0;
  int by_regs = t.occupancy_for_registers(regs_per_lane);
  if (by_regs == 0) return 0;
  int waves_per_block = ceil_div(block_threads, t.wave_size);
  int slots = t.max_waves_per_simd * t.simds_per_cu;  // waves one CU / SM holds
  if (waves_per_block > slots) return 0;
  // Resident blocks per CU / SM, each bound applied to whole blocks (the LDS bound
  // counts the system's reserve per block: targets.def).
  int blocks = std::min({t.blocks_for_lds(lds_bytes), by_regs * t.simds_per_cu / waves_per_block,
                         slots / waves_per_block});
  if (blocks == 0) return 0;
  return std::min(by_regs, ceil_div(blocks * waves_per_block, t.simds_per_cu));
}

Result<Resources> analyze(const CodeObject& object, const Target& target, std::string_view kernel_symbol,
                          int block_threads, int dynamic_lds_bytes) {
  // A host library holds no GPU registers, LDS allocation or occupancy: say
  // so rather than report numbers no GPU compiler produced.
  if (object.backend == Backend::emulate)
    return fail(Errc::invalid_input, std::string(kNotAnalysedEmulated), object.kernel_name);
  if (target.is_amd()) return analyze_amd(object, target, kernel_symbol, block_threads, dynamic_lds_bytes);
  return analyze_nvidia(object, target, kernel_symbol, block_threads, dynamic_lds_bytes);
}

}  // namespace ft
