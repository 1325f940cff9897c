#!/usr/bin/env bash
# fp8 prefill on the H200 (issue 30) in one device command: the same fp8 search
# with two builds, in the same run -- FLYTUNE (this branch: stages promoting in
# a producer warpgroup's consumers are in the space) and BASE (the build before
# it, the baseline) -- then the new search's winners exported with
# `flytune export --check gpu` (through libflytune_runtime), then the fp8 peers
# (bench/fp8_peers.py, Triton fp8 fused-MoE) with the new search's layer times.
# Every variant of both searches is verified against the dequantised reference
# before it is timed (flytune search). Files in $OUT: prefill.log and
# prefill.tar.gz (search_<build>_<problem>_<mode>.json, export_<problem>_<mode>.txt
# and .manifest.json, fp8.md, fp8.md.json).
#
#   OUT=$OUT FLYTUNE=.device-carry/prefill/flytune BASE=.device-carry/prefill/flytune-base \
#     PROBLEM=mixtral-8x7b MODES=per-tensor TOKENS=64,512,4096,16384 BUDGET_S=470 bash scripts/h200-prefill.sh
# MODES=static: the static-scale layer (--scales static: the caller's static X and h
# scales, stage 1 quantising h on store, no quantise_inter step), its peers the Triton
# per-tensor layer with the same calibrated scales (fp8_peers.py --modes static); a BASE
# from before the mode skips its searches. MODES=per-tensor,static compares both.
# EXTRA="block128:4096" adds, budget allowing, both builds' searches of PROBLEM in
# that mode at those tokens (no export, no peers); an item "deepseek-v3/block128:4096"
# names another problem, and then its fp8 peers run too. BASE_S (150): the seconds kept
# for the baseline search while the new one runs. The 2026-12-03 run showed
# both searches of four buckets need more than 260 + 150 s: give fewer buckets
# or more budget. BASE=none: no baseline build (no base searches). SPACE: the
# searches' --space (default: the default space; say in the record which was used);
# EXTRA_SPACE the same for EXTRA's searches.
# BF16="qwen3-30b:16384" then runs bench/h200_peers.py for that bf16 problem and
# tokens (its own flytune search with BF16_SPACE, Triton and grouped_mm peers, no
# JAX) in what is left of the budget: bf16.md, bf16.md.json.
cd "${REPO_ROOT:-$(dirname "$0")/..}" || exit 1
# shellcheck source=scripts/h200-run.sh
source scripts/h200-run.sh prefill  # OUT, W, LOG, left, say
PROBLEM=${PROBLEM:-mixtral-8x7b}
MODES=${MODES:-per-tensor}
TOKENS=${TOKENS:-64,512,4096,16384}
BUDGET_S=${BUDGET_S:-470}
PEERS_S=${PEERS_S:-60}
declare -A BIN=([new]=${FLYTUNE:-.device-carry/prefill/flytune} [base]=${BASE:-.device-carry/prefill/flytune-base})
builds=(new)
[ "${BIN[base]}" = none ] || builds+=(base)
for b in "${builds[@]}"; do
  cp "${BIN[$b]}" "$W/flytune-$b" && chmod +x "$W/flytune-$b" && BIN[$b]=$W/flytune-$b
done
space=()
[ -n "${SPACE:-}" ] && space=(--space "$SPACE")
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1
for b in "${builds[@]}"; do echo "$b: $("${BIN[$b]}" --version 2>&1 | tr '\n' ' ')" >>"$LOG"; done
[ -n "${SPACE:-}" ] && echo "space: $SPACE" >>"$LOG"

search() {  # build problem mode tokens reserve_s
  local db=$W/$1-$2-$3.db json=$W/search_$1_$2_$3.json start=$SECONDS limit=$(( $(left) - $5 ))
  if [ "$1" = base ] && [ "${BIN[base]}" = none ]; then return 1; fi
  # A scale mode the build does not know (MODES=static on a base from before it): no search.
  if ! "${BIN[$1]}" search --help 2>&1 | grep -q -- "$3"; then say "search $1 $2 $3: skipped, this build has no --scales $3"; return 1; fi
  if [ "$limit" -lt 30 ]; then say "search $1 $2 $3: skipped, no time left"; return 1; fi
  timeout -k 10 "$limit" "${BIN[$1]}" search --problem "$2" --dtype fp8 --scales "$3" --tokens "$4" --db "$db" \
    --seed 42 --graph --json "${space[@]}" >"$json" 2>>"$W/search_$1_$2_$3.log"
  local rc=$?
  say "search $1 $2 $3 rc=$rc in $((SECONDS - start)) s: $(python3 - "$json" <<'EOF' 2>&1 | tail -1
import json, sys
d = json.load(open(sys.argv[1]))
t = d["targets"][0]
layers = {w["tokens"]: round(w["median_us"], 1) for w in d["winners"] if w["kind"] == "layer"}
print(t["compiled"], "compiled,", t["pruned"], "pruned,", t["verified"], "verified,", t["verify_failed"], "failed; layer us", layers)
EOF
)"
  return $rc
}
export_check() {  # problem mode
  local db=$W/new-$1-$2.db dir=$W/export-$1-$2 start=$SECONDS limit=$(( $(left) - PEERS_S ))
  if [ "$limit" -lt 30 ]; then say "export $1 $2: skipped, no time left"; return 1; fi
  timeout -k 10 "$limit" "${BIN[new]}" export --db "$db" --out "$dir" --force --check gpu \
    --check-routing "${CHECK_ROUTING:-uniform,masked}" >"$W/export_$1_$2.txt" 2>&1
  local rc=$?
  cp "$dir/manifest.json" "$W/export_$1_$2.manifest.json" 2>/dev/null
  say "export $1 $2 rc=$rc in $((SECONDS - start)) s: $(grep -E 'checks passed|error' "$W/export_$1_$2.txt" | tail -1)"
}

IFS=, read -ra modes <<<"$MODES"
flyjson=()
# A search stopped by its time limit keeps the layer winners of the buckets it
# finished: those are exported and checked too.
has_layers() { python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); sys.exit(not any(w["kind"] == "layer" for w in d["winners"]))' "$1" 2>/dev/null; }
for m in "${modes[@]}"; do
  search new "$PROBLEM" "$m" "$TOKENS" $((PEERS_S + ${BASE_S:-150}))
  if has_layers "$W/search_new_${PROBLEM}_$m.json"; then
    flyjson+=(--flytune-json "$PROBLEM:$m=$W/search_new_${PROBLEM}_$m.json")
    export_check "$PROBLEM" "$m"
  fi
  search base "$PROBLEM" "$m" "$TOKENS" "$PEERS_S"
done
peers=$(( $(left) - 10 ))
if [ "$peers" -gt 25 ]; then
  timeout -k 5 "$peers" python3 bench/fp8_peers.py --problems "$PROBLEM" --modes "$MODES" --tokens "$TOKENS" \
    --out "$W/fp8.md" --budget-s $((peers - 15)) "${flyjson[@]}" >>"$W/peers.log" 2>&1
  say "fp8 peers rc=$?: $(grep -E '^ceilings|Error' "$W/peers.log" | head -3 | tr '\n' ' ')"
fi
space=()  # EXTRA's searches: EXTRA_SPACE, else the default space
[ -n "${EXTRA_SPACE:-}" ] && space=(--space "$EXTRA_SPACE")
for item in ${EXTRA:-}; do
  pm=${item%%:*} t=${item#*:} prob=$PROBLEM
  case $pm in */*) prob=${pm%%/*} ;; esac
  m=${pm#*/}
  search new "$prob" "$m" "$t" 20 && search base "$prob" "$m" "$t" 5
  if [ "$prob" != "$PROBLEM" ] && has_layers "$W/search_new_${prob}_$m.json" && [ "$(left)" -gt 40 ]; then
    timeout -k 5 $(( $(left) - 10 )) python3 bench/fp8_peers.py --problems "$prob" --modes "$m" --tokens "$t" \
      --out "$W/fp8_$prob.md" --budget-s $(( $(left) - 25 )) --flytune-json "$prob:$m=$W/search_new_${prob}_$m.json" \
      >>"$W/peers_$prob.log" 2>&1
    say "fp8 peers $prob $m rc=$?: $(grep -E '^ceilings|Error' "$W/peers_$prob.log" | head -3 | tr '\n' ' ')"
  fi
done
if [ -n "${BF16:-}" ] && [ "$(left)" -gt 60 ]; then
  bspace=()
  [ -n "${BF16_SPACE:-}" ] && bspace=(--space "$BF16_SPACE")
  timeout -k 5 $(( $(left) - 10 )) python3 bench/h200_peers.py --flytune "${BIN[new]}" --out "$W/bf16.md" \
    --problems "${BF16%%:*}" --tokens "${BF16#*:}" --skip-jax --work "$W/bf16" --budget-s $(( $(left) - 25 )) \
    "${bspace[@]}" >>"$W/bf16.log" 2>&1
  say "bf16 peers ${BF16} rc=$?: $(grep -E 'Error|ceilings' "$W/bf16.log" | head -3 | tr '\n' ' ')"
fi
(cd "$W" && tar czf "$OUT/prefill.tar.gz" --exclude='*.db*' --exclude='flytune-*' --exclude='export-*' --exclude='bf16/*' .)
say "done"
