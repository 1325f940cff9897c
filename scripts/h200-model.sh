#!/usr/bin/env bash
# The Mixtral model with each MoE implementation on the H200 (issue 33), one device command of ~5 minutes:
#   1. the carried wheel (scripts/python-wheel.sh --python python3.12) into /tmp/site, no registry;
#   2. `flytune search` of the model's buckets (decode B = 1, 32 -> T = 1, 32; prefill B x 512 -> T = 512,
#      16384) over a reduced wgmma space (the producer-warpgroup tiles that won these buckets before, 58
#      variants), bounded; then `flytune export --check gpu` (the export re-checked through the runtime at
#      T = 1, 31, 32, 512, 4097, 16384 under uniform and masked routing);
#   3. flytune-mixtral on that export: random bf16 weights (seed 0), LAYERS decoder layers, batch 1 and 32,
#      prompt 512, 32 new tokens, implementations dense, flytune, ragged_dot (the default order):
#      $OUT/model-bf16.json;
#   4. flytune alone again with flytune's call inside XLA's command buffers (XLA_FLAGS
#      --xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL): does the decode step lose the
#      ~0.2 ms a layer the 2026-12-03 run found outside its blocks? $OUT/model-bf16-cmdbuf.json (not run yet:
#      the 2026-12-03 run had steps 1-3 and 5, with flytune first);
#   5. with what time is left, the model's GPU test on the tiny export (pytest -m gpu test_model.py).
# LAYERS (default 16): at full size a layer's experts are 2.82 GB in bf16 and flytune's tiled copies (or
# ragged_dot's transposed ones) as much again, so 16 layers hold 45 GB of weights plus 45 GB of copies;
# all 32 would need 180 GB with the copies. Files in $OUT: h200-model.log, summary.txt, model-bf16.json,
# model-bf16-cmdbuf.json, mixtral-manifest.json.
#
#   OUT=... bash h200-model.sh        (from the repository root; the tool, the wheel and test_model.py are looked
#                                      for beside this script first, then in .dev/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/flytune-h200-model}
mkdir -p "$OUT"
LOG=$OUT/h200-model.log
: >"$LOG"
F=${FLYTUNE:-$here/flytune}; [ -x "$F" ] || [ -f "$F" ] || F=.dev/cli/flytune
WHEEL=$(ls "$here"/flytune-*.whl 2>/dev/null | head -1); [ -n "$WHEEL" ] || WHEEL=$(ls .dev/wheels/flytune-*.whl | head -1)
BUDGET=${BUDGET_S:-300}
LAYERS=${LAYERS:-16}
TOKENS=1,32,512,16384
SPACE="atom=wgmma_m64k16_f32_bf16;wgmma_producer=on;wgmma_tile_m=64,128,192;wgmma_tile_n=32,64,128,256;wgmma_stages=3,4;wgmma_tiles=1;split_k=1;reduce=atomic"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
section() { printf '\n===== [%s s] %s\n' "$SECONDS" "$*" >>"$LOG"; }
left() { echo $((BUDGET - SECONDS)); }
bounded() {  # limit (s), command...: output to the log
  local limit=$1; shift
  if [ "$limit" -lt 5 ]; then echo "no time left for: $*" >>"$LOG"; return 124; fi
  timeout -k 5 "$limit" "$@" >>"$LOG" 2>&1
}

section "machine"
{ nvidia-smi -L; nvidia-smi --query-gpu=driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  python3 --version; python3 -m pip list 2>/dev/null | grep -iE '^(jax|jaxlib|jax-cuda13-plugin|numpy|pytest) '
  ls -la "$here"; } >>"$LOG" 2>&1
chmod +x "$F" 2>/dev/null

section "install"
if python3 -m pip install -q --no-index --no-deps --target /tmp/site "$WHEEL" >>"$LOG" 2>&1; then
  export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
  python3 -c 'import flytune.models.generate, jax; print("import ok", jax.devices())' >>"$LOG" 2>&1 &&
    say "install: ok ($(basename "$WHEEL"))" || say "install: FAIL: import (see the log)"
else
  say "install: FAIL: pip install $WHEEL"
fi

section "search"
t0=$SECONDS
bounded 110 "$F" search --problem mixtral-8x7b --tokens "$TOKENS" --db /tmp/mixtral.db --seed 5 --no-baseline \
  --space "$SPACE"
rc=$?
say "search: rc $rc in $((SECONDS - t0)) s$([ $rc -eq 124 ] && echo ': cut short, exporting what it finished')"
grep -E '^ +[0-9]+ layer' "$LOG" | sed 's/ \{2,\}/ /g' | cut -c1-150 | tee -a "$OUT/summary.txt"
section "export --check gpu"
t0=$SECONDS
bounded 60 "$F" export --db /tmp/mixtral.db --out /tmp/mixtral-export --force --check gpu \
  --check-tokens 1,31,32,512,4097,16384 --check-routing uniform,masked
say "export: rc $? in $((SECONDS - t0)) s: $(grep -E 'checks passed|FAIL' "$LOG" | tail -1)"
cp /tmp/mixtral-export/manifest.json "$OUT/mixtral-manifest.json" 2>/dev/null

section "model"
t0=$SECONDS
bounded $(( $(left) - 90 )) python3 -m flytune.models.generate --export /tmp/mixtral-export --layers "$LAYERS" \
  --batch 1,32 --prompt-len 512 --new-tokens 32 --repeats 3 --json "$OUT/model-bf16.json" --no-progress
say "model: rc $? in $((SECONDS - t0)) s"
sed -n '/^| impl/,$p' "$LOG" | tee -a "$OUT/summary.txt"

section "model, flytune inside XLA's command buffers"
t0=$SECONDS
XLA_FLAGS=--xla_gpu_enable_command_buffer=FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL \
  bounded $(( $(left) - 40 )) python3 -m flytune.models.generate --export /tmp/mixtral-export --layers "$LAYERS" \
  --impl flytune --batch 1,32 --prompt-len 512 --new-tokens 32 --repeats 3 --json "$OUT/model-bf16-cmdbuf.json" \
  --no-progress
say "model (command buffers): rc $? in $((SECONDS - t0)) s"
grep -E '^\| flytune' "$LOG" | tail -2 | tee -a "$OUT/summary.txt"

section "pytest -m gpu test_model.py"
t0=$SECONDS
if bounded 20 "$F" export --db tests/data/tiny_forms.db --out /tmp/tiny-export --force --check none; then
  tests=$here/tests; [ -f "$tests/test_model.py" ] || tests=python/tests
  FLYTUNE_EXPORT_DIR=/tmp/tiny-export FLYTUNE_EXPECT_JAX=1 bounded $(( $(left) - 3 )) \
    python3 -m pytest -m gpu -q -rs -p no:cacheprovider "$tests/test_model.py"
  say "pytest: rc $? in $((SECONDS - t0)) s: $(grep -E ' (passed|failed|skipped)' "$LOG" | tail -1)"
fi
say "done: $SECONDS s; files: $(cd "$OUT" && echo *)"
