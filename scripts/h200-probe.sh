#!/usr/bin/env bash
# One device command on the H200 (about 6 minutes) for a build carried in
# .device-carry/ (flytune, ft_gpu_tests; scripts/h200-carry.sh makes it):
#   1. the gpu tests of that build (ft_gpu_tests: devices, runtime layers and
#      graphs, the atom and fp8 cross-checks, the worker fault);
#   2. searches of PROBLEMS (name:strategy, in order) into one database, so a
#      `model` search learns from the ones before it, each exported for its
#      problem and checked through the runtime on the GPU;
#   3. flytune db model-check on that database (how often the cost model's pick
#      holds the winner where every candidate was timed);
#   4. Nsight Compute on the stage winners of the first problem at its largest
#      bucket (where the time goes).
# Files in $OUT: probe.log (everything), search_NAME.json, model-check.json,
# ncu.txt, gpu-tests.txt. stdout: a short summary.
#
#   PROBLEMS=qwen3-30b:halving,olmoe:model bash scripts/h200-probe.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
OUT=${OUT:-/tmp/flytune-probe}
mkdir -p "$OUT"
LOG=$OUT/probe.log
: >"$LOG"
PROBLEMS=${PROBLEMS:-qwen3-30b:halving,olmoe:model}
TOKENS=${TOKENS:-1,16,64,512,4096,16384}
B=/tmp/flytune-build
mkdir -p "$B/cli" "$B/tests/gpu"
cp .device-carry/flytune "$B/cli/" && cp .device-carry/ft_gpu_tests "$B/tests/gpu/" && chmod +x "$B/cli/flytune" "$B/tests/gpu/ft_gpu_tests"
F=$B/cli/flytune
DB=/tmp/flytune-probe.db
rm -f "$DB"*
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1

say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv >>"$LOG" 2>&1
"$F" --version >>"$LOG" 2>&1

# 1. the gpu tests (the worker fault test finds the tool at ../../cli/flytune).
(cd "$B/tests/gpu" && FT_TEST_DATA_DIR=$REPO/tests/data timeout 300 ./ft_gpu_tests) >"$OUT/gpu-tests.txt" 2>&1
say "gpu tests rc=$? $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/gpu-tests.txt" | tr '\n' ' ')"
grep -E '^\[  FAILED  \]' "$OUT/gpu-tests.txt" | head -5 | tee -a "$LOG"

# 2. the searches, one database.
first=""
IFS=, read -ra specs <<<"$PROBLEMS"
for spec in "${specs[@]}"; do
  p=${spec%%:*}
  s=${spec#*:}
  [ -z "$first" ] && first=$p
  start=$SECONDS
  timeout -k 10 "${SEARCH_LIMIT_S:-240}" "$F" search --problem "$p" --tokens "$TOKENS" --db "$DB" --seed 42 --graph --json \
    --strategy "$s" >"$OUT/search_$p.json" 2>>"$LOG"
  say "search $p ($s) rc=$? in $((SECONDS - start)) s"
  timeout -k 10 180 "$F" export --db "$DB" --problem "$p" --out "/tmp/export-$p" --force --check gpu >>"$LOG" 2>&1
  say "export $p rc=$?: $(grep -E 'checked through|checks through the runtime failed' "$LOG" | tail -1)"
done

# 3. the cost model on what was timed in full.
timeout 300 "$F" db --db "$DB" model-check --json >"$OUT/model-check.json" 2>>"$LOG"
say "model-check rc=$?"
timeout 300 "$F" db --db "$DB" model-check >>"$LOG" 2>&1

# 4. where the time goes: the first problem's stage winners at its largest bucket.
last=${TOKENS##*,}
mapfile -t kernels < <(python3 - "$OUT/search_$first.json" "$last" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
for w in s.get("winners", []):
    if w["tokens"] == int(sys.argv[2]) and w["kind"] in ("moe1", "moe2"):
        print(w["kernel"])
PY
)
if [ ${#kernels[@]} -gt 0 ] && command -v ncu >/dev/null; then
  args=()
  for k in "${kernels[@]}"; do args+=(--variant "$k"); done
  timeout -k 10 150 ncu --clock-control none -k regex:'ft_sm_90a_moe[12]' -c 2 --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    "$F" verify --problem "$first" --tokens "$last" --seed 5 "${args[@]}" >"$OUT/ncu.txt" 2>&1
  say "ncu rc=$? on ${kernels[*]} at T=$last"
fi

python3 - "$OUT" "$PROBLEMS" <<'PY' | tee -a "$LOG"
import json, os, sys
out, problems = sys.argv[1], sys.argv[2]
for spec in problems.split(","):
    p = spec.split(":")[0]
    try:
        s = json.load(open(os.path.join(out, f"search_{p}.json")))
    except Exception as e:
        print(p, "no search json:", e); continue
    print(f"{p}: {s.get('seconds', 0):.0f} s, {s.get('measurements')} measurements, notes {len(s.get('notes', []))}")
    for w in s.get("winners", []):
        if w["kind"] == "layer":
            st = w.get("stages") or {}
            print(f"  T={w['tokens']:>6} layer {w['median_us']:9.1f} us floor% {100*w['floor_us']/w['median_us'] if w.get('floor_us') else 0:5.1f}"
                  f"  align {st.get('align_us', 0) or 0:7.1f} s1 {st.get('stage1_us', 0) or 0:8.1f} s2 {st.get('stage2_us', 0) or 0:8.1f}"
                  f" red {st.get('reduce_us', 0) or 0:6.1f}  {w['kernel'][-70:]}")
try:
    m = json.load(open(os.path.join(out, "model-check.json")))
    print("model-check:", json.dumps(m.get("methods", m))[:900])
except Exception as e:
    print("model-check: none", e)
PY
