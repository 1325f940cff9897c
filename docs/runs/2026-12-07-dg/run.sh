#!/usr/bin/env bash
# Issues 49/34, 2026-12-07 (second session): the K-grouped wgmma epilogue through shared memory
# (16-byte row chunks) against main's direct 8-byte stores, one device command:
# (1) qwen3-30b --pass backward at T = 4096, default space, --budget 8, main's binary (old) then the new one,
#     same seed, same kernel cache folder (the template's hash keys the changed kernels apart);
# (2) the peers (torch._grouped_mm autograd, ragged_dot VJP) on the new search's summary (scripts/h200-backward.sh);
# (3) Nsight Compute on the new K-grouped wgmma launches at T = 4096.
set -uo pipefail
K=${CARRY:-$(dirname "$0")}
W=/tmp/kg; mkdir -p $W; cp $K/flytune-* $W/; chmod +x $W/flytune-*
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
L=$OUT/kg.log
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader | tee $L
for b in ${BINS:-old new}; do
  s=$SECONDS
  timeout -k 10 ${SEARCH_S:-170} $W/flytune-$b search --problem qwen3-30b --pass backward --tokens 4096 --space default \
    --budget ${BW_BUDGET:-8} --db $W/$b.db --seed 42 --json >$OUT/search-$b.json 2>$OUT/search-$b.err
  echo "search $b rc=$? in $((SECONDS - s)) s: $($W/flytune-$b --version)" >>$L
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(sys.argv[2], w['pass'], w['tokens'], round(w['median_us'],1), {k: round(v,1) for k,v in (w.get('stages') or {}).items()}, w['kernel']) for w in d['winners']]" \
    $OUT/search-$b.json $b >>$L 2>&1
  python3 - $W/$b.db $b >>$OUT/programs.txt <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
for r in c.execute("select m.tokens, m.status, round(m.median_us,1), round(m.p10_us,1), round(m.p90_us,1), v.kernel_name from measurements m "
                   "join variants v on v.id = m.variant_id where v.kind like '%backward%' order by m.tokens, m.median_us"):
    print(sys.argv[2], *r, sep='\t')
PY
done
if [ -n "${PEERS:-}" ] && [ $((580 - SECONDS)) -gt 45 ]; then
  mkdir -p $OUT/peers
  mkdir -p $W/in; cp $OUT/search-${PEER_BIN:-new}.json $W/in/search_qwen3-30b.json
  summary="$W/in/search_{name}.json"
  OUT=$OUT/peers FLYTUNE=$W/flytune-${PEER_BIN:-new} PROBLEMS=qwen3-30b PASS=backward TOKENS=4096 REPO_ROOT=$PWD \
    SEARCH_JSON=$summary BUDGET_S=$((580 - SECONDS)) PEERS_S=$((570 - SECONDS)) bash scripts/h200-backward.sh >>$L 2>&1
  echo "peers done at $SECONDS s" >>$L
fi
if [ -n "${NCU:-}" ] && command -v ncu >/dev/null && [ $((585 - SECONDS)) -gt 50 ]; then
  timeout -k 5 $((580 - SECONDS)) ncu --target-processes all --clock-control none -k regex:"${NCU_K:-kgrouped_bf16_m128n256}" --launch-skip ${NCU_SKIP:-0} -c ${NCU_C:-2} \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats --section WarpStateStats \
    $W/flytune-new search --problem qwen3-30b --pass backward --tokens 4096 --space default --budget ${NCU_BUDGET:-8} --force \
    --db $W/ncu.db --seed 9 --in-process >$OUT/ncu.txt 2>&1
  echo "ncu rc=$? at $SECONDS s" >>$L
  grep -E "ft_sm_90a|Duration|Throughput|Registers Per|Achieved Occ|L2 Hit|Mem Busy|Max Bandwidth" $OUT/ncu.txt | head -60 >$OUT/ncu-summary.txt
fi
cat $L
