#!/usr/bin/env bash
# Issue 37 on the H200 in one device command (about 5 minutes in all): the
# gpt-oss-20b-like shape whose fastest stages at T=16384 did not fit together
# (192-row stage-1 tiles, 128-row stage-2 tiles: a row block of 384).
#   1. flytune search --experts 32 --hidden 2880 --inter 2880 --topk 4
#      --tokens 1,16,64,512,4096,16384 --graph in a reduced space (the wgmma
#      family, tile_m 64, 128 and 192, so the classes of the issue are there),
#      stopped with Ctrl-C's signal when its time is up (its results kept):
#      every bucket gets a layer winner, or the summary's "missing layers:"
#      line and exit 4 say which did not;
#   2. export --check-coverage, then export --check gpu (on a few T and two
#      routings, to stay in time); where the search left a bucket without a
#      layer, the refusal is kept and the export made again with --allow-missing;
#   3. check-export at T=16384 and T=20000 (above the largest bucket): the
#      runtime's coverage note (ft_plan_coverage) for every T it serves with
#      another bucket's kernels.
# The tool: $FLYTUNE, else .device-carry/flytune (a build carried to the
# device), else build/release/cli/flytune. Files in $OUT: pairing.log (the
# summary of each step), search.txt, winners.txt, coverage.txt, export.txt
# (+ export-allow-missing.txt), manifest.json, check-export.txt.
#
#   OUT=/tmp/out SEARCH_S=170 bash scripts/h200-pairing.sh
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
OUT=${OUT:-/tmp/flytune-pairing}
mkdir -p "$OUT"
LOG=$OUT/pairing.log
: >"$LOG"
BUDGET_S=${BUDGET_S:-290}   # the whole script
SEARCH_S=${SEARCH_S:-170}   # the search's share of it
if [ -n "${FLYTUNE:-}" ]; then F=$FLYTUNE
elif [ -f .device-carry/flytune ]; then
  mkdir -p /tmp/flytune-build/cli && cp .device-carry/flytune /tmp/flytune-build/cli/ && chmod +x /tmp/flytune-build/cli/flytune
  F=/tmp/flytune-build/cli/flytune
else F=build/release/cli/flytune; fi
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache
DB=/tmp/flytune-pairing.db
EXP=/tmp/flytune-pairing-export
rm -rf "$DB"* "$EXP"
PROBLEM=(--experts 32 --hidden 2880 --inter 2880 --topk 4)
TOKENS=1,16,64,512,4096,16384
# The wgmma family only, one tile_n per stage that divides both N (2I = 5760, H = 2880), no
# split-K: tile_m 64 / 128 / 192 with their warpgroups (the pairs the issue is about).
SPACE=${SPACE:-"atom=wgmma_m64k16_f32_bf16;wgmma_tile_m=64,128,192;wgmma_tile_n=64;wgmma_stages=4;wgmma_tiles=1;split_k=1;reduce=atomic"}
left() { echo $((BUDGET_S - SECONDS)); }
say() { echo "[$SECONDS s] $*" | tee -a "$LOG"; }
"$F" --version >>"$LOG" 2>&1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv >>"$LOG" 2>&1

# 1. the search; SIGINT when its share is up (it stops after the request in flight, saving everything).
timeout -s INT -k 20 "$SEARCH_S" "$F" search "${PROBLEM[@]}" --tokens $TOKENS --graph --space "$SPACE" --db "$DB" \
  --seed 42 >"$OUT/search.txt" 2>&1
rc=$?
say "search rc=$rc (0: every bucket has a layer; 4: some have none; 130/124: stopped at ${SEARCH_S} s)"
grep -E "^ +[0-9]+ (moe1|moe2|layer) |no layer winner|^missing layers|^interrupted|error" "$OUT/search.txt" | tee -a "$LOG"
"$F" db --db "$DB" winners >"$OUT/winners.txt" 2>&1

# 2. coverage, then the export checked on this GPU (refused if a bucket has no layer: then again, allowed).
"$F" export --db "$DB" --check-coverage --tokens $TOKENS,20000 >"$OUT/coverage.txt" 2>&1
say "check-coverage rc=$?: $(tail -1 "$OUT/coverage.txt")"
grep -E "MISSING|missing layer" "$OUT/coverage.txt" | tee -a "$LOG"
CHECK=(--check gpu --check-tokens 1,4096,16384,20000 --check-routing uniform,masked)
limit=$(( $(left) - 60 )); [ "$limit" -lt 30 ] && limit=30
timeout -k 10 "$limit" "$F" export --db "$DB" --out "$EXP" --force "${CHECK[@]}" >"$OUT/export.txt" 2>&1
rc=$?
say "export rc=$rc: $(grep -E 'checks passed|error' "$OUT/export.txt" | tail -1)"
if [ $rc -ne 0 ] && grep -q "without a layer winner" "$OUT/export.txt"; then
  limit=$(( $(left) - 45 )); [ "$limit" -lt 30 ] && limit=30
  timeout -k 10 "$limit" "$F" export --db "$DB" --out "$EXP" --force "${CHECK[@]}" --allow-missing \
    >"$OUT/export-allow-missing.txt" 2>&1
  say "export --allow-missing rc=$?: $(grep -E 'missing layers|checks passed|error' "$OUT/export-allow-missing.txt" | tr '\n' ' ')"
fi
cp "$EXP/manifest.json" "$OUT/manifest.json" 2>/dev/null &&
  say "manifest: buckets $(python3 -c 'import json,sys; p=json.load(open(sys.argv[1]))["problems"][0]; print([b["tokens"] for b in p["buckets"]], "missing_buckets", p.get("missing_buckets"))' "$OUT/manifest.json")"

# 3. check-export at the largest bucket and above it: the coverage lines.
if [ -f "$EXP/manifest.json" ]; then
  limit=$(( $(left) - 5 )); [ "$limit" -lt 20 ] && limit=20
  timeout -k 5 "$limit" "$F" check-export "$EXP" --tokens 16384,20000 --routing uniform >"$OUT/check-export.txt" 2>&1
  say "check-export rc=$?: $(tail -1 "$OUT/check-export.txt")"
  grep -E "^coverage:" "$OUT/check-export.txt" | tee -a "$LOG"
fi
say "done in $SECONDS s"
