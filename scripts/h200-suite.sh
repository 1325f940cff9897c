#!/usr/bin/env bash
# The shape suite against the peers on the H200 (issue 18), in one device command:
# the carried wheel (.dev/wheels, scripts/python-wheel.sh) installed into /tmp/site so the
# runtime column can call the flytune torch op, then bench/h200_peers.py over PROBLEMS
# with a time budget (what does not fit is skipped and says so). From the repo root:
#   BUDGET_S=560 bash scripts/h200-suite.sh qwen3-30b,olmoe,gpt-oss-120b-like
# Files in $OUT: suite.md, suite.md.json, searches.tar.gz (each search's JSON), suite.log.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PROBLEMS=${1:-mixtral-8x7b,mixtral-8x7b-tp8,qwen3-30b,qwen3-235b,deepseek-v3,olmoe,gpt-oss-120b-like}
OUT=${OUT:-/tmp/flytune-h200-suite}
mkdir -p "$OUT"
F=${FLYTUNE:-.dev/cli/flytune}
chmod +x "$F" 2>/dev/null
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PIP_DISABLE_PIP_VERSION_CHECK=1
if python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/wheels/flytune-*.whl >"$OUT/suite.log" 2>&1; then
  export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >>"$OUT/suite.log" 2>&1
read -ra extra <<<"${BENCH_ARGS:-}"
python3 bench/h200_peers.py --flytune "$F" --out "$OUT/suite.md" --problems "$PROBLEMS" --budget-s "${BUDGET_S:-560}" \
  --work /tmp/flytune-bench "${extra[@]}" >>"$OUT/suite.log" 2>&1
echo "bench rc=$?"
(cd "$OUT" && find . -maxdepth 1 -name 'search_*.json' -print0 | tar czf searches.tar.gz --null -T - && rm -f search_*.json)
grep -E "^flytune|^ceilings|Error|error" "$OUT/suite.log" | head -20
tail -3 "$OUT/suite.log"
