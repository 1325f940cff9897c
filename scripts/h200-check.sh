#!/usr/bin/env bash
# flytune's checks on an NVIDIA H200 (the device machine), from a build made on
# the Debian machine. Usage: scripts/h200-check.sh BUILD_DIR PART, PART one of
#   verify  devices, the gpu ctest label, every default-space variant verified at
#           T = 1, 7, 16, 64, 333, 512, 4096, compute-sanitizer memcheck
#   search  the default search for Mixtral 8x7B over T = 1, 16, 64, 512, 4096, 16384
# Logs and results go to $OUT (the device tool brings them back).
set -uo pipefail
B=${1:?build dir}
PART=${2:?part}
OUT=${OUT:-/tmp/flytune-h200}
mkdir -p "$OUT"
F=$B/cli/flytune
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/nvidia-smi-$PART.txt"

case "$PART" in
verify)
  "$F" devices | tee "$OUT/devices.txt"
  ctest --test-dir "$B/tests/gpu" -L gpu --output-on-failure > "$OUT/gpu-ctest.txt" 2>&1
  echo "gpu ctest rc=$?"; tail -4 "$OUT/gpu-ctest.txt"
  "$F" verify --tokens 1,7,16,64,333,512,4096 --seed 1234 --json > "$OUT/verify.json" 2> "$OUT/verify.err"
  echo "verify rc=$?"; tail -2 "$OUT/verify.err"
  python3 - "$OUT/verify.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
checks = r["checks"]
bad = [c for c in checks if not c["passed"]]
print(f"verify: {len(checks)} checks, {len(bad)} failed, {r['skipped']} pruned, {r['seconds']:.0f}s on {r['device']}")
for c in bad[:15]: print("FAIL", c["tokens"], c["check"], c["detail"][:160])
worst = max((c for c in checks if c["check"].startswith("ft_")), key=lambda c: c["rel_l2"], default=None)
if worst: print("worst variant rel L2", worst["rel_l2"], worst["check"], "T", worst["tokens"])
PY
  compute-sanitizer --tool memcheck --print-limit 20 "$F" verify --experts 8 --hidden 512 --inter 512 --topk 2 \
    --space small --tokens 7,33 --seed 7 > "$OUT/memcheck.txt" 2>&1
  echo "memcheck rc=$?"; grep -E "ERROR SUMMARY|checks" "$OUT/memcheck.txt" | tail -3
  ;;
search)
  /usr/bin/time -v "$F" search --tokens 1,16,64,512,4096,16384 --db "$OUT/h200.db" --seed 42 > "$OUT/search.txt" 2> "$OUT/search.err"
  echo "search rc=$?"; grep -E "Elapsed|Maximum resident" "$OUT/search.err"; tail -25 "$OUT/search.txt"
  "$F" db --db "$OUT/h200.db" snapshot "$OUT/h200-snapshot.db" && echo snapshot ok
  ;;
esac
