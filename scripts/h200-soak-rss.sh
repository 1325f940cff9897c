#!/usr/bin/env bash
# Where the soak's RSS goes on an NVIDIA H200 (the device machine): ft_soak
# (runtime/check/soak.hpp) sampling RSS, its file-backed share, the heap in use
# and what malloc holds at 32 points with every stream idle, in controls that
# separate the suspects:
#   default   the soak as scripts/h200-soak.sh runs it (checks on a sample)
#   fixed     (tiny only) the same with glibc's mmap threshold fixed at 128 KiB
#             (GLIBC_TUNABLES: no dynamic threshold, so the checks' large
#             host buffers are mapped and unmapped, not kept in the arenas)
#   nocheck   the same launches, only each thread's first one checked: the
#             runtime and the CUDA driver alone (select, launch, free)
# for tests/data/tiny_forms.db's export (every launch form) and the Mixtral
# 8x7B layer of tests/data/h200.db; /proc/PID/smaps of the default tiny run
# is copied three times during it (which mappings grow). Everything goes to
# $OUT/soak-rss.tar.gz (the device tool brings back few files).
# Usage: scripts/h200-soak-rss.sh CARRY [TINY_LAUNCHES] [MIXTRAL_LAUNCHES]
#   CARRY holds runtime/ft_soak and the exports tiny-export/ and
#   mixtral-export/ (written on the Debian machine: flytune export --db
#   tests/data/tiny_forms.db --out CARRY/tiny-export --check none; the same
#   for tests/data/h200.db). Defaults: 150000 and 2000 launches.
set -uo pipefail
C=${1:?carry dir}
NT=${2:-150000}
NM=${3:-2000}
OUT=${OUT:-/tmp/flytune-h200}
R=$OUT/soak-rss
mkdir -p "$R"
S=$C/runtime/ft_soak

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$R/nvidia-smi.txt"

run() {  # NAME EXPORT LAUNCHES CHECK_EVERY [ENV...]
  local name=$1 dir=$2 launches=$3 every=$4
  shift 4
  env "$@" /usr/bin/time -v "$S" "$dir" --launches "$launches" --tokens 1..20000 --threads 4 --check-every "$every" \
    --samples 32 > "$R/$name.txt" 2> "$R/$name.err" &
  local pid=$!
  if [ "$name" = tiny-default ]; then
    for t in 2 5 5; do
      sleep "$t"  # about 2, 7 and 12 s in (150,000 launches take about 11 s)
      cp "/proc/$(pgrep -P "$pid" ft_soak || echo "$pid")/smaps" "$R/$name-smaps-$t.txt" 2>/dev/null
    done
  fi
  wait "$pid"
  echo "$name rc=$?"
  grep -E "^ft_soak:" "$R/$name.txt"
  grep -E "Elapsed|Maximum resident" "$R/$name.err"
}

fixed=GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072
run tiny-default "$C/tiny-export" "$NT" 2500
run tiny-fixed "$C/tiny-export" "$NT" 2500 "$fixed"
run tiny-nocheck "$C/tiny-export" "$NT" "$NT"
run mixtral-default "$C/mixtral-export" "$NM" 100
run mixtral-nocheck "$C/mixtral-export" "$NM" "$NM"
tar -C "$OUT" -czf "$OUT/soak-rss.tar.gz" soak-rss
