#pragma once
// GPU targets as data (rows of targets.def).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace ft {

enum class Vendor { amd, nvidia };
enum class Fp8Flavour { none, fnuz, ocp };  // fnuz: e4m3fnuz/e5m2fnuz (gfx942); ocp: e4m3fn/e5m2
// ISA generation: which mnemonic spelling the disassembly shows (AtomInfo::mnemonic_on).
enum class Isa { cdna2, cdna3, cdna4, hopper };

struct Target {
  std::string_view name;           // "gfx942", "sm_90a"
  Vendor vendor;
  Isa isa;
  int sm;                          // NVIDIA: compute capability x 10 (90); 0 on AMD
  int wave_size;                   // 64 (AMD wave) or 32 (NVIDIA warp); FT_WAVE_SIZE in the templates
  int lds_bytes;                   // most LDS / shared memory one block may use
  int lds_per_cu;                  // LDS / shared memory of one CU / SM, for all its blocks
  int lds_reserve_per_block;       // taken by the system per resident block (sm_80+: 1 KiB)
  int lds_without_opt_in;          // most dynamic LDS before a kernel raises its limit (CUDA: 48 KiB)
  int lds_banks;
  int regs_per_lane;               // register budget of one lane
  int regs_file_per_simd;          // per lane, per SIMD / SM sub-partition
  int alloc_granule;               // registers are allocated in these steps
  int max_waves_per_simd;
  int simds_per_cu;                // SIMDs per CU / sub-partitions per SM
  int max_block_threads;           // most threads in one block
  Fp8Flavour fp8;
  std::string_view families;       // comma separated matrix-instruction families
  int min_llvm_major;              // AMD: oldest LLVM (clang) that knows the ISA
  std::string_view min_rocm;       // AMD: oldest ROCm whose comgr lists the ISA
  std::string_view min_cuda;       // NVIDIA: oldest CUDA toolkit (NVRTC) for the arch
  bool dry_run_default;            // built by a dry run that names no target

  bool is_amd() const { return vendor == Vendor::amd; }
  bool is_nvidia() const { return vendor == Vendor::nvidia; }
  std::vector<std::string> family_list() const;
  // The ISA name comgr uses ("amdgcn-amd-amdhsa--gfx942"); empty for NVIDIA.
  std::string comgr_isa() const;
  // Waves (warps) per SIMD allowed by a register count; 0 if it does not fit.
  int occupancy_for_registers(int regs_per_lane_used) const;
  // Blocks per CU / SM allowed by LDS use alone: lds_per_cu over each block's own
  // use plus the system's reserve per block (sm_90a: 228 KiB / (use + 1 KiB)).
  int blocks_for_lds(int lds_used) const;
  // Whether a CUDA toolkit (NVRTC) of this version is at least min_cuda.
  bool cuda_new_enough(int major, int minor) const;
  // The macros every unit compiled for this target gets ("FT_WAVE_SIZE=64", and
  // "FT_FP8_FNUZ=1" / "FT_FP8_OCP=1" from the fp8 column): how target facts reach
  // the templates (port.hpp's ft::kWaveSize, numeric.hpp's FT_TARGET_E4M3).
  std::vector<std::string> template_defines() const;
};

std::span<const Target> all_targets();
const Target* find_target(std::string_view name);
// Error for an unknown name that lists the known ones.
Result<const Target*> lookup_target(std::string_view name);

// The targets a dry run builds when none is named, in table order.
std::vector<const Target*> dry_run_default_targets();
// Target names joined for help texts and messages: "gfx90a, gfx942, gfx950 or sm_90a"
// (last = " or "); every known target, or the dry-run defaults.
std::string known_target_names(std::string_view last = ", ");
std::string dry_run_default_names(std::string_view last = " and ");

std::string_view to_string(Vendor v);
std::string_view to_string(Fp8Flavour f);
std::string_view to_string(Isa i);

}  // namespace ft
