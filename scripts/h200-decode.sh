#!/usr/bin/env bash
# The decode layer's fixed costs on the H200 (issue 32), in one device command, with one flytune tool:
#  1. step by step: for each of PROBLEMS, the same bounded search of the decode buckets twice, same seed and
#     inputs, without --graph so each layer winner is timed step by step (device events around every step:
#     align (with the y_acc clear when there is one), stage 1, stage 2, reduce) besides its whole time:
#     SPACE (stage 2 reduce=atomic: a clear step and a reduce launch) and SPACE plus the forms that write Y in
#     stage 2 (reduce=atomic_y,partials_y: no reduce launch, the clear folded into align at small T).
#  2. bench/h200_peers.py over PROBLEMS at TOKENS with PEER_SPACE: search --graph, export --check gpu, the
#     exported layer through the runtime (the carried wheel's torch op), torch._grouped_mm and Triton, same-run
#     ceilings and floors (BUDGET_S bounds it).
#  3. flytune check-export on each export at T = 1, 7, 16 with uniform, masked and one-empty routing.
#   OUT=... FLYTUNE=path/flytune WHEELS=dir-with-the-wheel bash scripts/h200-decode.sh
# (REPO: the checkout whose bench/h200_peers.py runs; default: this script's; set it when the script is carried).
# Files in $OUT: decode.log, steps_<atomic|y>_<problem>.json, suite.md, suite.md.json, searches (search_*.json),
# check_<problem>.txt.
set -uo pipefail
cd "${REPO:-$(dirname "$0")/..}" || exit 1
OUT=${OUT:-/tmp/flytune-h200-decode}
mkdir -p "$OUT"
LOG=$OUT/decode.log
: >"$LOG"
F=${FLYTUNE:?FLYTUNE=path/flytune}
chmod +x "$F"
PROBLEMS=${PROBLEMS:-qwen3-30b,olmoe,mixtral-8x7b-tp8}
TOKENS=${TOKENS:-1,16}
SPACE=${SPACE:-"atom=wgmma_m64k16_f32_bf16;wgmma_producer=off,on;wgmma_tile_m=64;wgmma_tile_n=32,64;wgmma_stages=4;wgmma_tiles=1;split_k=1"}
PEER_SPACE=${PEER_SPACE:-"atom=wgmma_m64k16_f32_bf16;wgmma_producer=off,on;wgmma_tile_m=64;wgmma_tile_n=32,64,128;wgmma_stages=4,7;wgmma_tiles=1,8;split_k=1,2;reduce=atomic,partials16,atomic_y,partials_y"}
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PIP_DISABLE_PIP_VERSION_CHECK=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1
echo "== $("$F" --version 2>&1 | head -1)" | tee -a "$LOG"
for p in ${PROBLEMS//,/ }; do
  for form in atomic y; do
    space="$SPACE;reduce=atomic"
    [ "$form" = y ] && space="$SPACE;reduce=atomic,atomic_y,partials_y"
    t0=$SECONDS
    timeout -k 5 "${STEP_LIMIT_S:-40}" "$F" search --problem "$p" --tokens "$TOKENS" --db "/tmp/steps-$form-$p.db" --seed 5 \
      --no-baseline --space "$space" --json >"$OUT/steps_${form}_$p.json" 2>>"$LOG"
    echo "steps $form $p: rc $? in $((SECONDS - t0)) s" | tee -a "$LOG"
  done
done
if python3 -m pip install -q --no-index --no-deps --target /tmp/site "${WHEELS:?WHEELS=dir}"/flytune-*.whl >>"$LOG" 2>&1; then
  export PYTHONPATH=/tmp/site
fi
t0=$SECONDS
python3 bench/h200_peers.py --flytune "$F" --out "$OUT/suite.md" --problems "$PROBLEMS" --tokens "$TOKENS" \
  --space "$PEER_SPACE" --skip-jax --budget-s "${BUDGET_S:-200}" --work /tmp/flytune-bench >>"$LOG" 2>&1
echo "peers: rc $? in $((SECONDS - t0)) s" | tee -a "$LOG"
for p in ${PROBLEMS//,/ }; do
  d=/tmp/flytune-bench/$p-export
  [ -d "$d" ] || { echo "check-export $p: no export" | tee -a "$LOG"; continue; }
  timeout -k 5 60 "$F" check-export "$d" --tokens 1,7,16 --routing uniform,masked,one-empty >"$OUT/check_$p.txt" 2>&1
  echo "check-export $p: rc $?" | tee -a "$LOG"
  grep -h '"reduction"' "$d/manifest.json" | sort | uniq -c >>"$OUT/check_$p.txt"
done
grep -E "^flytune|^ceilings|Error|error" "$LOG" | head -20
