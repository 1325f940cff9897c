#!/usr/bin/env bash
# The search on every GPU of a machine (issues 20 and 21), from a build made on
# the Debian machine. Logs and databases go to $OUT.
#   scripts/h200-devices.sh BUILD_DIR multi     --devices all over T = 1..16384 (wall time), then
#       the same with one worker killed on purpose mid-search, then its re-run (resume)
#   scripts/h200-devices.sh BUILD_DIR single    one GPU (--device cuda:0), and two shards
#       searched at once on two GPUs (--shard I/2 --device cuda:I) merged with db merge
#   scripts/h200-devices.sh BUILD_DIR compare A.db B.db   winners side by side, with each one's spread
#   scripts/h200-devices.sh BUILD_DIR export DB     export, then check-export on each GPU
#   scripts/h200-devices.sh BUILD_DIR one-gpu   what one GPU can show: --devices all with its
#       worker killed mid-search, its re-run, two shards searched one after the other and
#       merged, the two sets of winners side by side, the merged database exported and checked
# PROBLEM (env, default mixtral-8x7b) is a preset name.
set -uo pipefail
B=${1:?build dir}
PART=${2:?part}
shift 2
OUT=${OUT:-/tmp/flytune-devices}
LOG=/tmp/flytune-device-logs  # one file per command; $OUT/logs.txt gets them all (the device tool returns 8 files)
mkdir -p "$OUT" "$LOG"
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
  "$@" > "$LOG/$label.txt" 2>&1
  rc=$?
  { echo "=== $label: $*"; cat "$LOG/$label.txt"; } >> "$OUT/logs.txt"
  echo "$label: rc=$rc wall=$((($(now_ms) - start) / 1000))s"
}
sql() {  # database query: the rows, |-separated (python's sqlite3: the machine may have no sqlite3 CLI)
  python3 -c 'import sqlite3, sys
for r in sqlite3.connect(sys.argv[1]).execute(sys.argv[2]): print("|".join(map(str, r)))' "$1" "$2"
}

kill_later() {  # log: kills ${KILL}'s worker 8 s after the search's first timing line in the log
  for _ in $(seq 1 600); do
    sleep 0.5
    if grep -q "T=.* moe" "$1" 2>/dev/null; then
      sleep 8
      pid=$(pgrep -f "worker --device ${KILL:-cuda:1}" | head -1)
      [ -n "$pid" ] && kill -9 "$pid" && echo "killed worker pid $pid (${KILL:-cuda:1}) at $(date +%T)" | tee -a /dev/stderr
      return
    fi
  done
}

case "$PART" in
one-gpu)
  "$F" devices
  rm -f /tmp/all.db* /tmp/shard-*.db* /tmp/merged.db*
  KILL=cuda:0 kill_later "$LOG/all.txt" &
  timed all "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/all.db --seed 5
  wait
  grep -E "^ +[0-9]+ layer|^run |note" "$LOG/all.txt"
  sql /tmp/all.db "SELECT pci_bus_id, status, count(*) FROM measurements GROUP BY 1, 2"
  timed all-rerun "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/all.db --seed 5
  grep -E "^run " "$LOG/all-rerun.txt"
  timed shard-0 "$F" search --problem "$PROBLEM" --tokens $TOKENS --shard 0/2 --db /tmp/shard-0.db --seed 5
  timed shard-1 "$F" search --problem "$PROBLEM" --tokens $TOKENS --shard 1/2 --db /tmp/shard-1.db --seed 5
  "$F" db merge /tmp/merged.db /tmp/shard-0.db /tmp/shard-1.db
  "$0" "$B" compare /tmp/all.db /tmp/merged.db
  "$0" "$B" export /tmp/merged.db
  ;;
multi)
  "$F" devices
  rm -f /tmp/multi.db*
  timed multi "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/multi.db --seed 5
  grep -E "^ +cuda|^ +[0-9]+ layer|^run " "$LOG/multi.txt"
  # A worker killed on purpose (KILL, default the second GPU's) once the search has been timing for a while.
  rm -f /tmp/killed.db*
  kill_later "$LOG/killed.txt" &
  timed killed "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/killed.db --seed 5
  wait
  grep -E "^ +cuda|^ +[0-9]+ layer|^run |note" "$LOG/killed.txt"
  timed killed-rerun "$F" search --problem "$PROBLEM" --tokens $TOKENS --devices all --db /tmp/killed.db --seed 5
  grep -E "^run " "$LOG/killed-rerun.txt"
  sql /tmp/killed.db "SELECT pci_bus_id, status, count(*) FROM measurements GROUP BY 1, 2"
  "$F" db --db /tmp/multi.db snapshot "$OUT/multi.db"
  "$F" db --db /tmp/killed.db snapshot "$OUT/killed.db"
  ;;
single)
  rm -f /tmp/single.db* /tmp/shard-*.db* /tmp/merged.db*
  timed single "$F" search --problem "$PROBLEM" --tokens $TOKENS --device cuda:0 --db /tmp/single.db --seed 5
  grep -E "^ +[0-9]+ layer|^run " "$LOG/single.txt"
  if [ "$gpus" -ge 2 ]; then
    start=$(now_ms)
    timed shard-0 "$F" search --problem "$PROBLEM" --tokens $TOKENS --shard 0/2 --device cuda:0 --db /tmp/shard-0.db --seed 5 &
    timed shard-1 "$F" search --problem "$PROBLEM" --tokens $TOKENS --shard 1/2 --device cuda:1 --db /tmp/shard-1.db --seed 5 &
    wait
    echo "shards: wall=$((($(now_ms) - start) / 1000))s" | tee -a /dev/stderr
    "$F" db merge /tmp/merged.db /tmp/shard-0.db /tmp/shard-1.db
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
  timed export "$F" export --db "$db" --out /tmp/devices-export --force --check gpu
  tail -3 "$LOG/export.txt"
  for ((g = 0; g < gpus; g++)); do
    timed "check-gpu$g" env CUDA_VISIBLE_DEVICES=$g "$F" check-export /tmp/devices-export
    tail -2 "$LOG/check-gpu$g.txt"
  done
  ;;
*)
  echo "h200-devices.sh: unknown part '$PART' (multi, single, compare, export)" >&2
  exit 2
  ;;
esac
