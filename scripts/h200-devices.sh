#!/usr/bin/env bash
# The search on every GPU of a machine (issues 20 and 21), from a build made on
# the Debian machine. Logs and databases go to $OUT.
#   scripts/h200-devices.sh BUILD_DIR multi     --devices all over T = 1..16384 (wall time), then
#       the same with one worker killed on purpose mid-search, then its re-run (resume)
#   scripts/h200-devices.sh BUILD_DIR single    one GPU (--device cuda:0), and two shards
#       searched at once on two GPUs (--shard I/2 --device cuda:I) merged with db merge
#   scripts/h200-devices.sh BUILD_DIR compare A.db B.db   winners side by side, with each one's spread
#   scripts/h200-devices.sh BUILD_DIR export DB     export, then check-export on each GPU
# PROBLEM (env, default mixtral-8x7b) is a preset name.
set -uo pipefail
B=${1:?build dir}
PART=${2:?part}
shift 2
OUT=${OUT:-/tmp/flytune-devices}
mkdir -p "$OUT"
F=$B/cli/flytune
export FLYTUNE_CACHE_DIR=${FLYTUNE_CACHE_DIR:-/tmp/flytune-cache}
PROBLEM=${PROBLEM:-mixtral-8x7b}
TOKENS=1,16,64,512,4096,16384
gpus=$(nvidia-smi -L 2>/dev/null | wc -l)

now_ms() { echo $(($(date +%s%N) / 1000000)); }
timed() {  # label command...: runs it, logs its output, prints its wall time
  local label=$1 start rc
  shift
  start=$(now_ms)
  "$@" > "$OUT/$label.txt" 2>&1
  rc=$?
  echo "$label: rc=$rc wall=$((($(now_ms) - start) / 1000))s" | tee -a "$OUT/walls.txt"
}
sql() {  # database query: the rows, |-separated (python's sqlite3: the machine may have no sqlite3 CLI)
  python3 -c 'import sqlite3, sys
for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]): print("|".join(map(str, r)))' "$1" "$2"
}

case "$PART" in
multi)
  "$F" devices | tee "$OUT/devices.txt"
  rm -f /tmp/multi.db*
  timed multi "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/multi.db --seed 5
  grep -E "^ +cuda|^ +[0-9]+ layer|^run " "$OUT/multi.txt"
  # A worker killed on purpose: the second GPU's worker once the search has been timing for a while.
  rm -f /tmp/killed.db*
  (
    for _ in $(seq 1 240); do
      sleep 0.5
      if grep -q "T=.* moe" "$OUT/killed.txt" 2>/dev/null; then
        sleep 8
        pid=$(pgrep -f "worker --device cuda:1" | head -1)
        [ -n "$pid" ] && kill -9 "$pid" && echo "killed worker pid $pid (cuda:1) at $(date +%T)" >> "$OUT/walls.txt"
        break
      fi
    done
  ) &
  timed killed "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/killed.db --seed 5
  wait
  grep -E "^ +cuda|^ +[0-9]+ layer|^run |note" "$OUT/killed.txt"
  timed killed-rerun "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/killed.db --seed 5
  grep -E "^run " "$OUT/killed-rerun.txt"
  sql /tmp/killed.db "SELECT pci_bus_id, status, count(*) FROM measurements GROUP BY 1, 2" | tee "$OUT/killed-rows.txt"
  "$F" db --db /tmp/multi.db snapshot "$OUT/multi.db"
  "$F" db --db /tmp/killed.db snapshot "$OUT/killed.db"
  ;;
single)
  rm -f /tmp/single.db* /tmp/shard-*.db* /tmp/merged.db*
  timed single "$F" search --problem "$PROBLEM" --tokens $TOKENS --device cuda:0 --db /tmp/single.db --seed 5
  grep -E "^ +[0-9]+ layer|^run " "$OUT/single.txt"
  if [ "$gpus" -ge 2 ]; then
    start=$(now_ms)
    timed shard-0 "$F" search --problem "$PROBLEM" --tokens $TOKENS --shard 0/2 --device cuda:0 --db /tmp/shard-0.db --seed 5 &
    timed shard-1 "$F" search --problem "$PROBLEM" --tokens $TOKENS --shard 1/2 --device cuda:1 --db /tmp/shard-1.db --seed 5 &
    wait
    echo "shards: wall=$((($(now_ms) - start) / 1000))s" | tee -a "$OUT/walls.txt"
    "$F" db merge /tmp/merged.db /tmp/shard-0.db /tmp/shard-1.db | tee "$OUT/merge.txt"
    "$F" db --db /tmp/merged.db snapshot "$OUT/merged.db"
  fi
  "$F" db --db /tmp/single.db snapshot "$OUT/single.db"
  ;;
compare)
  for db in "$@"; do
    echo "== $db"
    sql "$db" "SELECT w.tokens, v.kernel_name, printf('%.1f', w.median_us), printf('%.1f-%.1f', w.p10_us, w.p90_us)
                   FROM winners w JOIN variants v ON v.id = w.variant_id WHERE w.kind = 'layer' ORDER BY w.tokens"
  done
  ;;
export)
  db=${1:?database}
  rm -rf /tmp/devices-export
  "$F" export --db "$db" --out /tmp/devices-export --force --check gpu > "$OUT/export.txt" 2>&1
  echo "export rc=$?"; tail -3 "$OUT/export.txt"
  for ((g = 0; g < gpus; g++)); do
    CUDA_VISIBLE_DEVICES=$g "$F" check-export /tmp/devices-export > "$OUT/check-gpu$g.txt" 2>&1
    echo "check-export on GPU $g: rc=$?"; tail -2 "$OUT/check-gpu$g.txt"
  done
  ;;
*)
  echo "h200-devices.sh: unknown part '$PART' (multi, single, compare, export)" >&2
  exit 2
  ;;
esac
