#!/usr/bin/env bash
# The shape suite against the peers on the H200 (issue 18), in one device command:
# the carried wheel (.device-carry/wheels, scripts/python-wheel.sh --out .device-carry/wheels) installed into /tmp/site so the
# runtime column can call the flytune torch op, then bench/h200_peers.py over PROBLEMS
# with a time budget (what does not fit is skipped and says so). From the repo root:
#   BUDGET_S=560 bash scripts/h200-suite.sh qwen3-30b,olmoe,gpt-oss-120b-like
# Files in $OUT: suite.md, suite.md.json, searches.tar.gz (each search's JSON), suite.log, and
# suite.db.gz: the one database of every problem's search (BENCH_ARGS="--db ..." is set here),
# without its code objects, so a later device command starts from its timings
# (.device-carry/suite.db.gz is unpacked first when present: --strategy model learns from it).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
PROBLEMS=${1:-mixtral-8x7b,mixtral-8x7b-tp8,qwen3-30b,qwen3-235b,deepseek-v3,olmoe,gpt-oss-120b-like}
OUT=${OUT:-/tmp/flytune-h200-suite}
mkdir -p "$OUT"
F=${FLYTUNE:-.device-carry/flytune}
chmod +x "$F" 2>/dev/null
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PIP_DISABLE_PIP_VERSION_CHECK=1
if python3 -m pip install -q --no-index --no-deps --target /tmp/site .device-carry/wheels/flytune-*.whl >"$OUT/suite.log" 2>&1; then
  export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >>"$OUT/suite.log" 2>&1
read -ra extra <<<"${BENCH_ARGS:-}"
DB=/tmp/flytune-bench/suite.db
mkdir -p /tmp/flytune-bench
if [ -f .device-carry/suite.db.gz ]; then gunzip -c .device-carry/suite.db.gz >"$DB"; fi
python3 bench/h200_peers.py --flytune "$F" --out "$OUT/suite.md" --problems "$PROBLEMS" --budget-s "${BUDGET_S:-560}" \
  --work /tmp/flytune-bench --db "$DB" "${extra[@]}" >>"$OUT/suite.log" 2>&1
echo "bench rc=$?"
# The timings for the next command (no code objects: each search builds its own again).
python3 - "$DB" "$OUT/suite.db" <<'PY' && gzip -f "$OUT/suite.db"
import shutil, sqlite3, sys
shutil.copy(sys.argv[1], sys.argv[2])
c = sqlite3.connect(sys.argv[2])
c.execute("DELETE FROM code_objects")
c.commit()
c.execute("VACUUM")
c.close()
PY
(cd "$OUT" && find . -maxdepth 1 -name 'search_*.json' -print0 | tar czf searches.tar.gz --null -T - && rm -f search_*.json)
grep -E "^flytune|^ceilings|Error|error" "$OUT/suite.log" | head -20
tail -3 "$OUT/suite.log"
