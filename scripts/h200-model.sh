#!/usr/bin/env bash
# The Mixtral model with each MoE implementation on the H200 (issue 33), one device command of ~5 minutes:
#   1. the carried wheel (scripts/python-wheel.sh --python python3.12) into /tmp/site, no registry;
#   2. `flytune search` of the model's buckets (decode B = 1, 32 -> T = 1, 32; prefill B x 512 -> T = 512,
#      16384) over a reduced wgmma space (the producer-warpgroup tiles that won these buckets before, 58
#      variants), bounded; then `flytune export --check gpu` (the export re-checked through the runtime at
#      T = 1, 31, 32, 512, 4097, 16384 under uniform and masked routing);
#   3. the decode step and XLA's command buffers: flytune-mixtral at FLAGS_LAYERS (default 8) layers, B = 1,
#      P = 512, flytune and ragged_dot, once per XLA_FLAGS setting -- default; FUSION,CUBLAS,CUBLASLT,CUDNN
#      (no custom calls in the graphs); empty (no command buffers); and, where the default's optimised step
#      has flytune's call outside every command buffer, FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN. The default
#      run also dumps the optimised decode step (XLA's HLO: where the command buffers and the custom calls
#      are: cmdbuf.txt) and takes a jax.profiler trace of 8 decode steps (flytune.models.trace's summary in
#      the JSON, the perfetto files in traces.tar.gz): $OUT/flags-<name>.json;
#   4. the model at LAYERS (default all 32) layers, default flags, implementations dense, flytune,
#      ragged_dot, batch 1 and 32, prompt 512, 32 new tokens: $OUT/model-bf16.json. Each implementation holds
#      the experts' weights once, in its own layout (flytune's tiled copies, ragged_dot's transposed ones,
#      dense's originals), made layer by layer from the seed, so 32 layers (90 GB of experts) fit;
#   5. with what time is left, batch 1 at prompt 4096 (flytune, ragged_dot, dense): $OUT/model-bf16-p4096.json
#      (P4096=0 skips it);
#   6. FP8=1: the fp8 model (--fp8: per-tensor e4m3 experts): `flytune search --dtype fp8 --scales per-tensor`
#      of the same buckets over a reduced fp8 wgmma space, bounded, `export --check gpu`, then the model at
#      LAYERS layers, batch 1 and 32, prompt 512: $OUT/model-fp8.json.
#   7. TORCH=1: the PyTorch model (flytune-mixtral-torch, the same weights and prompts) on the same export at
#      TORCH_LAYERS (default LAYERS) layers, dense, flytune, grouped_mm, batch 1 and 32, prompt 512, 32 new
#      tokens, with the time left (P4096=0 leaves it more), TORCH_ARGS added (e.g. --cuda-graph: the decode
#      steps replayed from CUDA graphs): $OUT/model-torch.json.
# FLAGS=0 skips step 3. JAX may use XLA_PYTHON_CLIENT_MEM_FRACTION (default here 0.95) of the GPU: at 75%
# the XLA paths' batch-32 temporaries did not fit beside 32 layers of experts.
# Files in $OUT: h200-model.log, summary.txt, flags-*.json, cmdbuf.txt, traces.tar.gz, model-bf16*.json,
# mixtral-manifest.json (at most 8 come back: the flags JSONs are tarred into flags.tar.gz).
#
#   OUT=... bash h200-model.sh        (from the repository root; the tool and the wheel are looked for beside
#                                      this script first, then in .dev/)
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-/tmp/flytune-h200-model}
mkdir -p "$OUT"
LOG=$OUT/h200-model.log
: >"$LOG"
F=${FLYTUNE:-$here/flytune}; [ -x "$F" ] || [ -f "$F" ] || F=.dev/cli/flytune
WHEEL=$(ls "$here"/flytune-*.whl 2>/dev/null | head -1); [ -n "$WHEEL" ] || WHEEL=$(ls .dev/wheels/flytune-*.whl | head -1)
BUDGET=${BUDGET_S:-330}
LAYERS=${LAYERS:-32}
FLAGS_LAYERS=${FLAGS_LAYERS:-8}
TOKENS=1,32,512,16384
SPACE="atom=wgmma_m64k16_f32_bf16;wgmma_producer=on;wgmma_tile_m=64,128,192;wgmma_tile_n=32,64,128,256;wgmma_stages=3,4;wgmma_tiles=1;split_k=1;reduce=atomic"
FP8_SPACE="atom=wgmma_m64k32_f32_e4m3;wgmma_producer=on;wgmma_tile_m=64,128;wgmma_tile_n=64,128,256;wgmma_stages=3,4;split_k=1;reduce=atomic"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false PIP_DISABLE_PIP_VERSION_CHECK=1
export XLA_PYTHON_CLIENT_MEM_FRACTION=${XLA_PYTHON_CLIENT_MEM_FRACTION:-0.95}

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
bounded 75 "$F" search --problem mixtral-8x7b --tokens "$TOKENS" --db /tmp/mixtral.db --seed 5 --no-baseline \
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

mixtral() {  # limit (s), arguments...: flytune-mixtral on the export, its output to the log
  local limit=$1; shift
  bounded "$limit" python3 -m flytune.models.generate --export /tmp/mixtral-export --no-progress "$@"
}

if [ "${FLAGS:-1}" != 0 ]; then
section "decode step under XLA's command-buffer settings ($FLAGS_LAYERS layers)"
flags_run() {  # name, the --xla_gpu_enable_command_buffer value (or "default": the flag not given), arguments...
  local name=$1 value=$2; shift 2
  local t0=$SECONDS flags=${EXTRA_XLA:-} limit=$(( $(left) - 170 ))
  [ "$value" = default ] || flags="$flags --xla_gpu_enable_command_buffer=$value"
  [ "$limit" -le 45 ] || limit=45
  echo "XLA_FLAGS=$flags" >>"$LOG"
  XLA_FLAGS=$flags mixtral "$limit" --layers "$FLAGS_LAYERS" --impl flytune,ragged_dot --batch 1 --prompt-len 512 \
    --new-tokens 32 --repeats 1 --no-parts --json "$OUT/flags-$name.json" "$@"
  say "flags $name ($value): rc $? in $((SECONDS - t0)) s: $(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))
print("; ".join("%s %.2f ms/step" % (x["impl"], x["decode_ms_per_step"]) for x in r["runs"]))' "$OUT/flags-$name.json" 2>&1)"
}
EXTRA_XLA="--xla_dump_to=/tmp/dump --xla_dump_hlo_module_re=.*step.* --xla_dump_hlo_as_text" \
  flags_run default default --trace /tmp/traces
python3 - /tmp/dump >"$OUT/cmdbuf.txt" 2>&1 <<'PY'
# Where the command buffers and flytune's calls sit in each optimised decode step (ENTRY's instructions).
import glob, re, sys
for path in sorted(glob.glob(sys.argv[1] + "/*after_optimizations.txt")):
    text = open(path).read()
    comps, name = {}, None
    for line in text.splitlines():
        m = re.match(r"^(ENTRY )?%?([\w.\-]+) .*\{$", line)
        if m:
            name = ("ENTRY " if m.group(1) else "") + m.group(2); comps[name] = []
        elif name:
            comps[name].append(line)
    cmd = [n for n in comps if "command_buffer" in n]
    inside = sum(sum("flytune_moe_layer" in l for l in comps[n]) for n in cmd)
    entry = next((n for n in comps if n.startswith("ENTRY")), None)
    top = sum("flytune_moe_layer" in l for l in comps.get(entry, []))
    print(f"{path.split('/')[-1]}: {len(cmd)} command-buffer computations; flytune_moe_layer calls inside them: "
          f"{inside}; in ENTRY (outside): {top}; ENTRY instructions: {len(comps.get(entry, []))}")
    seq = [("CB" if "command_buffer" in l else "FT" if "flytune_moe_layer" in l else None) for l in comps.get(entry, [])]
    print("  ENTRY order (CB: a command buffer, FT: flytune's call):", " ".join(s for s in seq if s)[:600])
PY
cat "$OUT/cmdbuf.txt" >>"$LOG"
flags_run no-custom-call FUSION,CUBLAS,CUBLASLT,CUDNN
flags_run none ""
if grep -q "in ENTRY (outside): [1-9]" "$OUT/cmdbuf.txt"; then
  flags_run custom-call FUSION,CUBLAS,CUBLASLT,CUSTOM_CALL,CUDNN
fi
(cd /tmp && tar czf "$OUT/traces.tar.gz" traces $(cd /tmp && ls dump/*step*after_optimizations.txt 2>/dev/null))
(cd "$OUT" && tar czf flags.tar.gz flags-*.json && rm -f flags-*.json)
fi

section "model: $LAYERS layers"
t0=$SECONDS
reserve=10; [ "${FP8:-0}" = 1 ] && reserve=${FP8_S:-240}  # the fp8 section's seconds, kept from the bf16 model
mixtral $(( $(left) - reserve )) --layers "$LAYERS" --batch 1,32 --prompt-len 512 --new-tokens 32 --repeats 2 \
  --json "$OUT/model-bf16.json"
say "model: rc $? in $((SECONDS - t0)) s"
sed -n '/^| impl/,$p' "$LOG" | tee -a "$OUT/summary.txt"

if [ "${FP8:-0}" = 1 ]; then
  section "fp8 search"
  t0=$SECONDS
  bounded 90 "$F" search --problem mixtral-8x7b --dtype fp8 --scales per-tensor --tokens "$TOKENS" --db /tmp/mixtral-fp8.db \
    --seed 5 --no-baseline --space "$FP8_SPACE"
  rc=$?
  say "fp8 search: rc $rc in $((SECONDS - t0)) s$([ $rc -eq 124 ] && echo ': cut short, exporting what it finished')"
  grep -E '^ +[0-9]+ layer' "$LOG" | tail -4 | sed 's/ \{2,\}/ /g' | cut -c1-150 | tee -a "$OUT/summary.txt"
  t0=$SECONDS
  bounded 60 "$F" export --db /tmp/mixtral-fp8.db --out /tmp/mixtral-fp8-export --force --check gpu \
    --check-tokens 1,31,32,512,4097 --check-routing uniform
  say "fp8 export: rc $? in $((SECONDS - t0)) s: $(grep -E 'checks passed|FAIL' "$LOG" | tail -1)"
  section "fp8 model: $LAYERS layers"
  t0=$SECONDS
  bounded $(( $(left) - 5 )) python3 -m flytune.models.generate --export /tmp/mixtral-fp8-export --no-progress --fp8 \
    --layers "$LAYERS" --batch 1,32 --prompt-len 512 --new-tokens 32 --repeats 2 --json "$OUT/model-fp8.json"
  say "fp8 model: rc $? in $((SECONDS - t0)) s"
  sed -n '/^| impl/,$p' "$LOG" | tail -12 | tee -a "$OUT/summary.txt"
fi

if [ "${P4096:-1}" != 0 ]; then
section "model: $LAYERS layers, batch 1, prompt 4096"
t0=$SECONDS
mixtral $(( $(left) - 3 )) --layers "$LAYERS" --batch 1 --prompt-len 4096 --new-tokens 32 --repeats 2 \
  --impl flytune,ragged_dot,dense --json "$OUT/model-bf16-p4096.json"
say "model P=4096: rc $? in $((SECONDS - t0)) s"
fi
if [ "${TORCH:-0}" = 1 ]; then
section "torch model: ${TORCH_LAYERS:-$LAYERS} layers"
t0=$SECONDS
# shellcheck disable=SC2086  # TORCH_ARGS: options, split on purpose
bounded $(( $(left) - 3 )) python3 -m flytune.models.torch_generate --export /tmp/mixtral-export --no-progress \
  --layers "${TORCH_LAYERS:-$LAYERS}" --batch 1,32 --prompt-len 512 --new-tokens 32 --repeats 2 \
  --json "$OUT/model-torch.json" ${TORCH_ARGS:-}
say "torch model: rc $? in $((SECONDS - t0)) s"
sed -n '/^| impl/,$p' "$LOG" | tail -8 | tee -a "$OUT/summary.txt"
fi
say "done: $SECONDS s; files: $(cd "$OUT" && echo *)"
