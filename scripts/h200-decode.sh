#!/usr/bin/env bash
# The decode layer's fixed costs on the H200 (issue 32), before/after in one device command: two flytune
# tools (BEFORE, AFTER) run the same bounded search of the decode buckets, without --graph, so each layer
# winner is timed step by step (device events around every step: align, stage 1, stage 2, reduce; the
# y_acc clear counts with align) besides its whole time. Same space, seed and inputs for both.
#   OUT=... BEFORE=path/flytune AFTER=path/flytune bash scripts/h200-decode.sh
# Files in $OUT: decode.log, search_<tool>_<problem>.json.
set -uo pipefail
OUT=${OUT:-/tmp/flytune-h200-decode}
mkdir -p "$OUT"
LOG=$OUT/decode.log
: >"$LOG"
SPACE=${SPACE:-"atom=wgmma_m64k16_f32_bf16;wgmma_producer=on;wgmma_tile_m=64;wgmma_tile_n=32,64;wgmma_stages=4;wgmma_tiles=1;split_k=1;reduce=atomic"}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1
for tool in BEFORE AFTER; do
  F=${!tool}; chmod +x "$F"
  echo "== $tool: $("$F" --version 2>&1 | head -1)" | tee -a "$LOG"
  for spec in "qwen3-30b 1,16" "mixtral-8x7b 1,32"; do
    set -- $spec
    t0=$SECONDS
    timeout -k 5 ${LIMIT_S:-75} "$F" search --problem "$1" --tokens "$2" --db "/tmp/$tool-$1.db" --seed 5 \
      --no-baseline --space "$SPACE" --json >"$OUT/search_${tool}_$1.json" 2>>"$LOG"
    echo "$tool $1: rc $? in $((SECONDS - t0)) s" | tee -a "$LOG"
  done
done
