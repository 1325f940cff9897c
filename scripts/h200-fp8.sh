#!/usr/bin/env bash
# fp8 on the H200 (issue 19) in one device command, for a build carried in
# .device-carry/ (flytune, ft_gpu_tests):
#   1. the gpu tests of that build (incl. the fp8 atom and conversion cross-checks);
#   2. fp8 searches on sm_90a: the tiny problem in every scale mode of MODES, then
#      PROBLEM in MAIN_MODES, every variant verified against the dequantised fp32
#      reference before it is timed; each search's winners exported with
#      `flytune export --check gpu` (every bucket, a T between buckets and above
#      them, under CHECK_ROUTING, run through libflytune_runtime with fresh codes
#      and scales against the reference before the export is written);
#   3. bench/fp8_peers.py: the fp8 peers (Triton fp8 per-tensor and block128,
#      torch._scaled_grouped_mm) in the same run, with the searches' layer times
#      in the "flytune (search)" column.
# Files in $OUT: fp8.log, gpu-tests.txt, search_fp8_PROBLEM_MODE.json,
# export_PROBLEM_MODE.txt (the export's check) and .manifest.json, fp8.md, fp8.md.json.
# SKIP_GPU_TESTS=1 skips step 1; TINY=0 skips the tiny searches.
#
#   PROBLEM=mixtral-8x7b MAIN_MODES=per-tensor BUDGET_S=520 bash scripts/h200-fp8.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
OUT=${OUT:-/tmp/flytune-fp8}
mkdir -p "$OUT"
LOG=$OUT/fp8.log
: >"$LOG"
PROBLEM=${PROBLEM:-mixtral-8x7b}
MODES=${MODES:-per-tensor,per-token,block128}
TOKENS=${TOKENS:-1,16,64,512,4096,16384}
BUDGET_S=${BUDGET_S:-560}
B=/tmp/flytune-build
mkdir -p "$B/cli" "$B/tests/gpu"
cp .device-carry/flytune "$B/cli/" && cp .device-carry/ft_gpu_tests "$B/tests/gpu/" && chmod +x "$B/cli/flytune" "$B/tests/gpu/ft_gpu_tests"
F=$B/cli/flytune
rm -f /tmp/flytune-fp8-*.db*
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1
left() { echo $((BUDGET_S - SECONDS)); }
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >>"$LOG" 2>&1
"$F" --version >>"$LOG" 2>&1

# 1. the gpu tests (the worker fault test finds the tool at ../../cli/flytune).
if [ "${SKIP_GPU_TESTS:-0}" != 1 ]; then
  (cd "$B/tests/gpu" && FT_TEST_DATA_DIR=$REPO/tests/data timeout 150 ./ft_gpu_tests) >"$OUT/gpu-tests.txt" 2>&1
  say "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/gpu-tests.txt" | tr '\n' ' ')"
  grep -E '^\[  FAILED  \]' "$OUT/gpu-tests.txt" | head -5 | tee -a "$LOG"
fi

# 2. fp8 searches: first the tiny problem in every scale mode (the real wgmma e4m3 path
#    against the dequantised reference, quickly), then PROBLEM in MAIN_MODES; each
#    search's winners exported and checked through the runtime on this GPU.
export_check() {  # problem mode
  local DB=/tmp/flytune-fp8-$1-$2.db start=$SECONDS dir=/tmp/flytune-fp8-export-$1-$2
  local limit=$(( $(left) - ${PEERS_S:-200} ))
  if [ "$limit" -lt 30 ]; then say "export $1 fp8 $2: skipped, no time left"; return 1; fi
  timeout -k 10 "$limit" "$F" export --db "$DB" --out "$dir" --force --check gpu \
    --check-routing "${CHECK_ROUTING:-uniform,zipf,one-empty,masked}" >"$OUT/export_$1_$2.txt" 2>&1
  local rc=$?
  cp "$dir/manifest.json" "$OUT/export_$1_$2.manifest.json" 2>/dev/null
  say "export $1 fp8 $2 rc=$rc in $((SECONDS - start)) s: $(grep -E 'checks passed|error' "$OUT/export_$1_$2.txt" | tail -1)"
}
search() {  # problem mode tokens limit
  local DB=/tmp/flytune-fp8-$1-$2.db start=$SECONDS limit=$4
  [ "$limit" -gt $(( $(left) - ${PEERS_S:-200} )) ] && limit=$(( $(left) - ${PEERS_S:-200} ))
  if [ "$limit" -lt 30 ]; then say "search $1 fp8 $2: skipped, no time left"; return 1; fi
  timeout -k 10 "$limit" "$F" search --problem "$1" --dtype fp8 --scales "$2" --tokens "$3" --db "$DB" \
    --seed 42 --graph --json >"$OUT/search_fp8_$1_$2.json" 2>>"$LOG"
  local rc=$?
  say "search $1 fp8 $2 rc=$rc in $((SECONDS - start)) s: $(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["targets"][0]["verified"], "verified,", d["targets"][0]["verify_failed"], "failed,", len(d["winners"]), "winners")' "$OUT/search_fp8_$1_$2.json" 2>&1 | tail -1)"
  return $rc
}
IFS=, read -ra modes <<<"$MODES"
if [ "${TINY:-1}" != 0 ]; then
  for m in "${modes[@]}"; do search tiny "$m" 1,16,128 45 && export_check tiny "$m"; done
fi
flyjson=()
IFS=, read -ra main_modes <<<"${MAIN_MODES:-per-tensor}"
for m in "${main_modes[@]}"; do
  pm=$m; [ "$m" = per-token ] && pm=rowwise   # the peers' name of per-token x per-channel scales
  search "$PROBLEM" "$m" "$TOKENS" "${SEARCH_LIMIT_S:-150}" && flyjson+=(--flytune-json "$PROBLEM:$pm=$OUT/search_fp8_${PROBLEM}_$m.json") &&
    export_check "$PROBLEM" "$m"
done

# 3. the peers in the same run.
peers=$(( $(left) - 15 ))
if [ "$peers" -gt 30 ]; then
  timeout -k 10 "$peers" python3 bench/fp8_peers.py --problems "$PROBLEM${PEER_PROBLEMS:+,$PEER_PROBLEMS}" --out "$OUT/fp8.md" \
    --budget-s $((peers - 20)) "${flyjson[@]}" >>"$LOG" 2>&1
  say "fp8 peers rc=$?"
fi
grep -E "^ceilings|Error|error" "$LOG" | head -20
