# shellcheck shell=bash
# Sourced by the H200 device scripts from the repository root, as
# `source scripts/h200-run.sh NAME` (h200-prefill.sh, h200-backward.sh): sets
# OUT (default /tmp/flytune-NAME, made), W (/tmp/flytune-NAME-work, made afresh)
# and LOG ($OUT/NAME.log, emptied, then the GPU's name, driver, clocks and power
# limit), and defines left (the seconds of $BUDGET_S left) and say (a line with
# the seconds since the start, to stdout and $LOG).
set -uo pipefail
OUT=${OUT:-/tmp/flytune-$1}
mkdir -p "$OUT"
W=/tmp/flytune-$1-work
rm -rf "$W" && mkdir -p "$W"
LOG=$OUT/$1.log
: >"$LOG"
left() { echo $((BUDGET_S - SECONDS)); }
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >>"$LOG" 2>&1
