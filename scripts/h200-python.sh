#!/usr/bin/env bash
# The Python package on the H200 (issue 17), in one device command of at most
# ~585 s, the most important results first:
#   1. the carried wheel (.dev/wheels/, scripts/python-wheel.sh) installed into
#      /tmp/site, no registry;
#   2. the GPU tests: the tiny export (tests/data/tiny_forms.db, checked on the
#      GPU), then `pytest -m gpu python/tests` against it;
#   3. the Mixtral 8x7B search (the carried tool, .dev/cli/flytune; --graph, so
#      the export's time_us is the layer's graph-replay time) and its export;
#   4. bench/python_bindings.py against that export (JAX FFI vs ragged_dot and
#      the runtime, torch op vs Triton and torch._grouped_mm).
# Every step is bounded by what is left of the budget (a search cut short still
# exports the buckets it finished; the bench skips what it has no time for).
# Everything goes to $OUT/h200-python.log; stdout gets a short summary. Files in
# $OUT: h200-python.log, python_bindings.{md,json}, mixtral-manifest.json,
# mixtral.db (the search's database, when small enough).
#
#   bash scripts/h200-python.sh            (repo root, on the device; BUDGET_S=585)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/flytune-h200-python}
mkdir -p "$OUT"
LOG=$OUT/h200-python.log
: >"$LOG"
F=${FLYTUNE:-.dev/cli/flytune}
BUDGET=${BUDGET_S:-585}
TOKENS=1,16,64,512,4096,16384
SEARCH_ARGS=${SEARCH_ARGS:---graph}
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
section() { printf '\n===== [%s s] %s\n' "$SECONDS" "$*" >>"$LOG"; }
left() { echo $((BUDGET - SECONDS)); }
# Runs a step with a limit (seconds), its output to the log; returns its status.
bounded() {
  local limit=$1; shift
  if [ "$limit" -lt 5 ]; then echo "no time left for: $*" >>"$LOG"; return 124; fi
  timeout -k 10 "$limit" "$@" >>"$LOG" 2>&1
}

section "machine"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 --version; python3 -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|jax-cuda13-plugin|torch|triton|numpy|pytest) '
  git log --oneline -1 2>/dev/null; ls -la .dev/wheels .dev/cli; } >>"$LOG" 2>&1
chmod +x "$F" 2>/dev/null
"$F" --version >>"$LOG" 2>&1 || say "FAIL: no flytune tool at $F"

# 1. The wheel.
section "install"
if python3 -m pip install -q --no-index --no-deps --target /tmp/site .dev/wheels/flytune-*.whl >>"$LOG" 2>&1; then
  export PYTHONPATH=/tmp/site
  if python3 -c 'import flytune, flytune.jax, flytune.torch, jax; print("import ok", flytune.__file__, jax.devices())' >>"$LOG" 2>&1; then
    say "install: ok ($(basename .dev/wheels/flytune-*.whl))"
  else
    tail -3 "$LOG"; say "install: FAIL: import flytune / flytune.jax / flytune.torch (see the log)"
  fi
else
  tail -3 "$LOG"; say "install: FAIL: pip install of .dev/wheels/*.whl"
fi

# 2. The GPU tests on the tiny export.
section "tiny export (--check gpu)"
if bounded 90 "$F" export --db tests/data/tiny_forms.db --out /tmp/tiny-export --force --check gpu; then
  say "tiny export: $(grep -E 'checked|passed' "$LOG" | tail -1 | sed 's/^ *//')"
else
  say "tiny export: FAIL with --check gpu (rc $?): $(tail -1 "$LOG"); exporting unchecked for the tests"
  bounded 30 "$F" export --db tests/data/tiny_forms.db --out /tmp/tiny-export --force --check none
fi
section "pytest -m gpu"
t0=$SECONDS
FLYTUNE_EXPORT_DIR=/tmp/tiny-export FLYTUNE_EXPECT_JAX=1 FLYTUNE_EXPECT_TORCH=1 \
  bounded 240 python3 -m pytest -m gpu -q -rs -p no:cacheprovider --durations=8 python/tests
rc=$?
say "pytest -m gpu: rc $rc in $((SECONDS - t0)) s: $(grep -E '(passed|failed|error|skipped|no tests ran)( |,|$)' "$LOG" | grep -E ' in [0-9.]+s' | tail -1)"
grep -E '^(FAILED|ERROR) ' "$LOG" | head -8 | cut -c1-220

# 3. The Mixtral search and export; the bench needs ~150 s after it.
section "search"
t0=$SECONDS
limit=$(( $(left) - 150 )); [ "$limit" -gt 330 ] && limit=330
# shellcheck disable=SC2086
bounded "$limit" "$F" search --problem mixtral-8x7b --tokens "$TOKENS" --db /tmp/mixtral.db --seed 5 $SEARCH_ARGS
rc=$?
say "search: rc $rc in $((SECONDS - t0)) s (limit $limit s)$([ $rc -eq 124 ] && echo ': cut short, exporting what it finished')"
grep -E '^ +[0-9]+ layer|no layer winner' "$LOG" | sed 's/ \{2,\}/ /g' | cut -c1-60
section "export"
if bounded 60 "$F" export --db /tmp/mixtral.db --out /tmp/mixtral-export --force --check none; then
  cp /tmp/mixtral-export/manifest.json "$OUT/mixtral-manifest.json"
  say "export: ok, buckets $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print([b["tokens"] for p in m["problems"] for b in p["buckets"]])' /tmp/mixtral-export/manifest.json)"
else
  say "export: FAIL: $(tail -1 "$LOG")"
fi

# 4. The bench (it writes its results after every measurement).
section "bench"
t0=$SECONDS
if [ -f /tmp/mixtral-export/manifest.json ]; then
  bounded $(( $(left) - 10 )) python3 bench/python_bindings.py --export /tmp/mixtral-export \
    --out "$OUT/python_bindings" --tokens "$TOKENS" --deadline-s $(( $(left) - 25 )) --verbose
  say "bench: rc $? in $((SECONDS - t0)) s"
else
  say "bench: not run (no export)"
fi
[ -f "$OUT/python_bindings.md" ] && grep -E '^\|' "$OUT/python_bindings.md"

# The search's database, when it fits the tool's file limit.
if [ -f /tmp/mixtral.db ] && "$F" db --db /tmp/mixtral.db snapshot /tmp/mixtral-snapshot.db >>"$LOG" 2>&1 &&
   [ "$(stat -c %s /tmp/mixtral-snapshot.db)" -lt 15000000 ]; then
  cp /tmp/mixtral-snapshot.db "$OUT/mixtral.db"
fi
say "done: $SECONDS s; files: $(cd "$OUT" && echo *)"
