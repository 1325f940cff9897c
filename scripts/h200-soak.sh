#!/usr/bin/env bash
# The runtime under a server's load on an NVIDIA H200 (the device machine), from
# a build made on the Debian machine: ft_soak (runtime/check/soak.hpp) -- one
# runtime shared by 4 host threads on 4 streams, 100,000 launches at T drawn
# log-uniformly from 1..20,000, every plan selected and freed per launch, every
# 2,500th launch of a thread checked against the reference kernels; host RSS and
# heap, live device allocations, streams, modules and open files sampled with
# the streams idle from the warm-up's end to the end (exit 1 if any check
# failed, anything grew, or RSS's trend over the last half adds more than
# ft_soak's --rss-slack). scripts/h200-soak-rss.sh: where RSS goes.
# Usage: scripts/h200-soak.sh BUILD_DIR [LAUNCHES]   (BUILD_DIR holds cli/flytune and runtime/ft_soak,
# e.g. a carried folder: cp build/release/cli/flytune .device-carry/abi/cli/ and
# build/release/runtime/ft_soak .device-carry/abi/runtime/, ~27 MB; both need only libstdc++)
#   part 1: tests/data/tiny_forms.db (its layer winners cover every launch form:
#           persistent, split-K, partials, shuffled and tiled weights), LAUNCHES
#           launches (default 100000)
#   part 2: tests/data/h200.db's Mixtral 8x7B layer, LAUNCHES/10 launches (its
#           layer at T=20,000 runs ~17 ms, so fewer launches fit the time)
# Logs and reports go to $OUT (the device tool brings them back). Not a timing:
# launches_per_second in the reports is the soak's throughput, checks included.
set -uo pipefail
B=${1:?build dir}
N=${2:-100000}
OUT=${OUT:-/tmp/flytune-h200}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
F=$B/cli/flytune
S=$B/runtime/ft_soak
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/nvidia-smi-soak.txt"

soak() {  # NAME DB LAUNCHES CHECK_EVERY EXPORT_CHECK
  local name=$1 db=$2 launches=$3 every=$4 check=$5
  rm -rf "$OUT/$name-export"
  "$F" export --db "$db" --out "$OUT/$name-export" --check "$check" > "$OUT/$name-export.txt" 2>&1
  echo "$name export rc=$?"; tail -2 "$OUT/$name-export.txt"
  /usr/bin/time -v "$S" "$OUT/$name-export" --launches "$launches" --tokens 1..20000 --threads 4 \
    --check-every "$every" > "$OUT/$name-soak.txt" 2> "$OUT/$name-soak.err"
  echo "$name soak rc=$?"; grep -E "^ft_soak:" "$OUT/$name-soak.txt"; grep -E "Elapsed|Maximum resident" "$OUT/$name-soak.err"
}

soak tiny "$ROOT/tests/data/tiny_forms.db" "$N" 2500 gpu
# (check-export of the Mixtral export takes minutes; the soak checks its own sample)
soak mixtral "$ROOT/tests/data/h200.db" $((N / 10)) 500 none
