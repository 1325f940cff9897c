#!/usr/bin/env bash
# The one-launch decode layer against today's two-stage forms on the H200
# (issue 32), in one device command. From the repo root, with the CLI binary
# carried in .device-carry/decode/flytune:
#   OUT=$OUT bash scripts/h200-decode.sh [PROBLEMS] [TOKENS]
# Runs bench/h200_peers.py (same-run ceilings; per problem `flytune search
# --graph --json`, whose layer step times every stage pair and every decode
# column count on the same inputs and keeps each one's time in the winner's
# "candidates"; `flytune export --check gpu`, every bucket re-checked through
# libflytune_runtime; the peers). Files in $OUT: suite.md (+ .json), suite.log,
# searches.tar.gz (each search's JSON), nvidia-smi.txt.
set -uo pipefail
# The repo root: where bench/h200_peers.py is (the script also runs from a carried copy).
cd "$(dirname "$0")" || exit 1
while [ ! -f bench/h200_peers.py ] && [ "$PWD" != / ]; do cd ..; done
PROBLEMS=${1:-qwen3-30b,mixtral-8x7b-tp8,olmoe}
TOKENS=${2:-1,16}
OUT=${OUT:-/tmp/flytune-h200-decode}
mkdir -p "$OUT"
F=${FLYTUNE:-.device-carry/decode/flytune}
chmod +x "$F" 2>/dev/null
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >"$OUT/nvidia-smi.txt" 2>&1
"$F" --version >>"$OUT/nvidia-smi.txt" 2>&1
mkdir -p /tmp/flytune-bench
python3 bench/h200_peers.py --flytune "$F" --out "$OUT/suite.md" --problems "$PROBLEMS" --tokens "$TOKENS" \
  --budget-s "${BUDGET_S:-240}" --work /tmp/flytune-bench --skip-jax >"$OUT/suite.log" 2>&1
echo "bench rc=$?"
# Each bucket's layer winner and every form it was timed against (same inputs, graph replay, L2 flushed).
python3 - "$OUT"/search_*.json <<'PY' 2>&1 | tee "$OUT/forms.txt"
import json, os, sys
for path in sys.argv[1:]:
    name = os.path.basename(path)[len("search_"):-len(".json")]
    with open(path) as f:
        doc = json.load(f)
    for w in doc.get("winners", []):
        if w.get("kind") != "layer":
            continue
        c = (w.get("stages") or {}).get("candidates", [])
        pairs = [x["median_us"] for x in c if "_decode_" not in x["layer"]]
        dec = {x["layer"].rsplit("_", 1)[-1]: round(x["median_us"], 2) for x in c if "_decode_" in x["layer"]}
        print(f"{name} T={w['tokens']}: winner {w['kernel']} {w['median_us']:.2f} us (p10 {w['p10_us']:.2f}, p90 "
              f"{w['p90_us']:.2f}), floor {w.get('floor_us', float('nan')):.2f} us; fastest pair (short timing) "
              f"{min(pairs) if pairs else float('nan'):.2f} us; decode {dec}")
PY
(cd "$OUT" && find . -maxdepth 1 -name 'search_*.json' -print0 | tar czf searches.tar.gz --null -T - && rm -f search_*.json)
grep -E "^flytune|^ceilings|Error|error" "$OUT/suite.log" | head -20
tail -5 "$OUT/suite.log"
