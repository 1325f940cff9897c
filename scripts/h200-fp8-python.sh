#!/usr/bin/env bash
# fp8 through the Python package on the H200 (issue 19), in one device command:
#   1. the carried wheel (.device-carry/wheels/, scripts/python-wheel.sh) installed into /tmp/site;
#   2. pytest -m gpu python/tests/test_gpu.py: bf16 against the tiny export (tests/data/tiny_forms.db, checked on
#      the GPU first), fp8 against a tiny fp8 search in every scale mode (the test's fixture), each fp8 layer run
#      through flytune.torch / flytune.jax against a dequantised reference, with the weight scales doubled as a mutant;
#   3. with what is left of BUDGET_S: DeepSeek-V3 block128 over six buckets through scripts/h200-fp8.sh.
# Files in $OUT: fp8-python.log, pytest-gpu.txt, ds/ (h200-fp8.sh's files).
#
#   OUT=$OUT BUDGET_S=480 bash scripts/h200-fp8-python.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/flytune-fp8-python}
mkdir -p "$OUT"
LOG=$OUT/fp8-python.log
: >"$LOG"
BUDGET_S=${BUDGET_S:-480}
F=/tmp/flytune-build/cli/flytune
mkdir -p /tmp/flytune-build/cli && cp .device-carry/flytune "$F" && chmod +x "$F"
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PIP_DISABLE_PIP_VERSION_CHECK=1
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
"$F" --version >>"$LOG" 2>&1
python3 -m pip install -q --no-index --no-deps --target /tmp/site .device-carry/wheels/flytune-*.whl >>"$LOG" 2>&1 ||
  say "install: FAIL"
export PYTHONPATH=/tmp/site
timeout 120 "$F" export --db tests/data/tiny_forms.db --out /tmp/tiny-export --force --check gpu >>"$LOG" 2>&1
say "tiny export rc=$?"
FLYTUNE_BIN=$F FLYTUNE_EXPORT_DIR=/tmp/tiny-export FLYTUNE_EXPECT_JAX=1 FLYTUNE_EXPECT_TORCH=1 \
  timeout "${PYTEST_S:-300}" python3 -m pytest -m gpu -q -rs -p no:cacheprovider python/tests/test_gpu.py >"$OUT/pytest-gpu.txt" 2>&1
say "pytest rc=$? $(tail -1 "$OUT/pytest-gpu.txt")"
grep -E "^(FAILED|ERROR)" "$OUT/pytest-gpu.txt" | head -10 | tee -a "$LOG"
left=$((BUDGET_S - SECONDS))
if [ "$left" -gt 200 ]; then
  OUT=$OUT/ds TINY=0 SKIP_GPU_TESTS=1 PROBLEM=deepseek-v3 MAIN_MODES=block128 BUDGET_S=$left PEERS_S=60 \
    SEARCH_LIMIT_S=$((left - 130)) CHECK_ROUTING=uniform,masked bash scripts/h200-fp8.sh >>"$LOG" 2>&1
  say "deepseek-v3 block128: $(grep -E 'search deepseek|export deepseek' "$OUT/ds/fp8.log" | tr '\n' ' ')"
else
  say "deepseek-v3 block128: skipped ($left s left)"
fi
