#pragma once
// GPU targets as data (rows of targets.def).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "generator/error.hpp"

namespace ft {

enum class Vendor { amd, nvidia };
enum class Fp8Flavour { none, fnuz, ocp };  // fnuz: e4m3fnuz/e5m2fnuz (gfx942); ocp: e4m3fn/e5m2

struct Target {
  std::string_view name;           // "gfx942", "sm_90a"
  Vendor vendor;
  int wave_size;                   // 64 (AMD wave) or 32 (NVIDIA warp)
  int lds_bytes;                   // most LDS / shared memory one block may use
  int lds_banks;
  int regs_per_lane;               // register budget of one lane
  int regs_file_per_simd;          // per lane, per SIMD / SM sub-partition
  int alloc_granule;               // registers are allocated in these steps
  int max_waves_per_simd;
  int simds_per_cu;                // SIMDs per CU / sub-partitions per SM
  Fp8Flavour fp8;
  std::string_view families;       // comma separated matrix-instruction families
  int min_llvm_major;              // AMD: oldest LLVM (clang) that knows the ISA
  std::string_view min_rocm;       // AMD: oldest ROCm whose comgr lists the ISA
  std::string_view min_cuda;       // NVIDIA: oldest CUDA toolkit (NVRTC) for the arch

  bool is_amd() const { return vendor == Vendor::amd; }
  bool is_nvidia() const { return vendor == Vendor::nvidia; }
  std::vector<std::string> family_list() const;
  // The ISA name comgr uses ("amdgcn-amd-amdhsa--gfx942"); empty for NVIDIA.
  std::string comgr_isa() const;
  // Waves (warps) per SIMD allowed by a register count; 0 if it does not fit.
  int occupancy_for_registers(int regs_per_lane_used) const;
  // Blocks per CU / SM allowed by LDS use alone (per-CU LDS equals lds_bytes on AMD;
  // 228 KiB per SM on sm_90a).
  int blocks_for_lds(int lds_used) const;
};

std::span<const Target> all_targets();
const Target* find_target(std::string_view name);
// Error for an unknown name that lists the known ones.
Result<const Target*> lookup_target(std::string_view name);

std::string_view to_string(Vendor v);
std::string_view to_string(Fp8Flavour f);

}  // namespace ft
