#!/usr/bin/env bash
# shellcheck disable=SC2086  # paths without spaces (/tmp, $OUT), kept as the command that ran
# Kept as run (2026-12-07 15:11 UTC, H100): bash docs/runs/2026-12-07-bw/run.sh with FLYTUNE_BIN=<a release build of flytune>;
# the second command of that session: PROBLEMS=mixtral-8x7b VERIFY_S=1 BW_END=300 PEERS_S=100 BW_BUDGET=4.
# Issues 49/34: the backward's wgmma forms on the GPU, one device command:
# (1) verification: qwen3-30b search --pass backward at T = 1, 333, default space, budget 2 per role;
# (2) scripts/h200-backward.sh with PASS=backward on PROBLEMS (qwen3-30b) at T = 4096, default space,
#     BW_BUDGET (8) per role, then the torch / ragged_dot peers;
# (3) Nsight Compute (SpeedOfLight, Occupancy, LaunchStats) on the first backward GEMM launches of a
#     budget-2 search (its verification launches, at T = 333);
# (4) every backward program's measurement from the databases, and the winners' per-role times.
set -uo pipefail
cd "$(dirname "$0")/../../.." || exit 1
F=/tmp/ftb/flytune; mkdir -p /tmp/ftb; cp ${FLYTUNE_BIN:-.device-carry/bw/flytune} $F; chmod +x $F
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
L=$OUT/bw.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $L
$F --version >>$L
s=$SECONDS
timeout ${VERIFY_S:-60} $F search --problem ${VP:-qwen3-30b} --pass backward --tokens 1,333 --space default --budget 2 --db /tmp/v.db --seed 7 \
  --json >$OUT/verify.json 2>$OUT/verify.err
echo "verify search rc=$? in $((SECONDS-s)) s" >>$L
tail -20 $OUT/verify.err >>$L
mkdir -p $OUT/bw
OUT=$OUT/bw FLYTUNE=$F PROBLEMS=${PROBLEMS:-qwen3-30b} PASS=backward TOKENS=${TOKENS:-4096} REPO_ROOT=$PWD BUDGET_S=$((${BW_END:-310} - SECONDS)) PEERS_S=${PEERS_S:-110} \
  SPACE=default BW_BUDGET=${BW_BUDGET:-8} bash scripts/h200-backward.sh >>$L 2>&1
echo "backward done at $SECONDS s" >>$L
# Where the backward's time goes: Nsight Compute on the first backward GEMM launches of a one-config-per-role search.
if command -v ncu >/dev/null && [ $((420 - SECONDS)) -gt 60 ]; then
  timeout -k 5 $((415 - SECONDS)) ncu --target-processes all --clock-control none -k regex:'kgrouped|dgrad' -c ${NCU_C:-8} \
    --section SpeedOfLight --section Occupancy --section LaunchStats \
    $F search --problem ${PROBLEMS:-qwen3-30b} --pass backward --tokens ${TOKENS:-4096} --space default --budget 2 --force \
    --db /tmp/ncu.db --seed 9 --in-process >$OUT/ncu.txt 2>&1
  echo "ncu rc=$? at $SECONDS s" >>$L
  grep -E "ft_sm_90a|Duration|Compute \(SM\) Throughput|Memory Throughput|DRAM Throughput|Registers Per|Achieved Occ" $OUT/ncu.txt | head -80 >$OUT/ncu-summary.txt
fi
python3 - >$OUT/programs.txt <<'PY'
import sqlite3
for db in ('/tmp/v.db', '/tmp/flytune-backward-work/qwen3-30b.db', '/tmp/flytune-backward-work/mixtral-8x7b.db', '/tmp/flytune-backward-work/deepseek-v3.db'):
    try:
        c = sqlite3.connect(db)
        rows = c.execute("select v.kind, m.tokens, m.phase, m.status, m.median_us, m.p10_us, m.p90_us, m.samples, m.sm_clock_mhz, "
                         "v.kernel_name, substr(m.error_message,1,300) from measurements m join variants v on v.id = m.variant_id "
                         "order by v.kind, m.tokens, m.median_us").fetchall()
    except Exception as e:
        print(db, 'error', e); continue
    print('#', db)
    for r in rows: print(*r[:9], r[9][:400], r[10], sep='\t')
PY
for j in /tmp/flytune-backward-work/search_*.json; do python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(sys.argv[1].split('/')[-1], w['pass'], w['tokens'], round(w['median_us'],1), w.get('stages'), w['kernel'][:300]) for w in d['winners']]" $j >>$L 2>&1; done
cat $L; cat $OUT/bw/backward.md 2>/dev/null | grep -E "^\| [0-9]|winners" | head; grep -ic "kgrouped" $OUT/programs.txt
