#!/usr/bin/env bash
# Issues 49/34, 2026-12-07 (third session), one device command:
# (1) qwen3-30b --pass backward at T = 4096, default space, --budget 8, seed 42, for each of BINS, same kernel
#     cache folder: flytune-old (466fce5: the K-grouped staged epilogue, dgrad2 direct, dW timed in fp32),
#     flytune-new (main at 2b6fdfc: dgrad2's staged SwiGLU epilogue, dW timed in the weights' 16-bit type),
#     flytune-cand (3eda07d: new + the K-grouped rows found by the whole block);
# (2) the peers (torch._grouped_mm autograd, ragged_dot VJP) on the new search's summary;
# (3) Nsight Compute on the new K-grouped wgmma m128n256 s3 launches of a budget-7 search (T = 333 verifications
#     first, then the T = 4096 timings: told apart by grid and duration).
set -uo pipefail
K=${CARRY:-$(dirname "$0")}
SEARCH_S=${SEARCH_S:-200} PEERS=1 bash "$K"/run.sh
left=$((${TOTAL_S:-585} - SECONDS))
W=/tmp/kg
if [ "$left" -gt 60 ] && command -v ncu >/dev/null; then
  export FLYTUNE_CACHE_DIR=/tmp/flytune-cache
  timeout -k 5 $((left - 5)) ncu --target-processes all --clock-control none -k regex:'kgrouped_bf16_m128n256k64_w8x1_wgmma_s3' \
    -c ${NCU_C:-40} --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats \
    --section WarpStateStats --section SchedulerStats \
    $W/flytune-${NCU_BIN:-new} search --problem qwen3-30b --pass backward --tokens 4096 --space default --budget 7 --force \
    --db $W/ncu.db --seed 9 --in-process >"$OUT"/ncu.txt 2>&1
  echo "ncu rc=$? at $SECONDS s" >>"$OUT"/kg.log
  grep -E "ft_sm_90a|Duration|Throughput|Registers Per|Achieved Occ|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Stall|Warp Cycles|Issued Warp|No Eligible|Active Warps|Grid Size|Dynamic Shared" "$OUT"/ncu.txt | head -400 >"$OUT"/ncu-summary.txt
fi
tail -5 "$OUT"/kg.log
