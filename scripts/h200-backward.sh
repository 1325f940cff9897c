#!/usr/bin/env bash
# The backward pass on the H200 (issue 34) in one device command: per problem,
# `flytune search --pass both --json` (the forward, then the backward program;
# every variant and program verified against its CPU reference before it is
# timed), then bench/backward_peers.py with those summaries: flytune's backward
# and forward layer winners beside torch._grouped_mm's autograd backward and
# jax.lax.ragged_dot's VJP of the same layer, each peer's gradients checked
# against an fp32 reference before it is timed, floors from same-run ceilings.
# Files in $OUT: backward.log (the steps, their rc and times), backward.md (the
# Markdown section for docs/PERFORMANCE.md), backward.md.json (its numbers) and
# backward.tar.gz (search_<problem>.json and .log, peers.log).
#
#   OUT=$OUT FLYTUNE=.device-carry/backward/flytune BUDGET_S=560 bash scripts/h200-backward.sh
#
# PROBLEMS (mixtral-8x7b,qwen3-30b) and TOKENS (4096,16384): the searches' and the
# peers'. BUDGET_S (560): the whole run, within one device command's 600 s; the
# searches share what is left before PEERS_S (180: kept for the peers) evenly
# (a search stopped by its limit -- SIGTERM, SIGKILL 30 s later -- ends after
# the program in flight and keeps the winners of the buckets it finished; the
# peers still run). A first run of both problems in 560 s may not fit: the log
# gives each search's seconds; one problem per device command then. SPACE
# (default): the searches' --space, a preset (default, small or wide: the
# backward takes no axis overrides); BW_BUDGET
# (4): the backward's `--budget N`, configurations per role (0: all); SEARCH_JSON
# ('dir/search_{name}.json'): reuse saved summaries instead of searching.
# PASS (both): the searches' --pass; backward times the backward program alone
# (the peers then compare flytune's backward only).
# REPO_ROOT: the repository (default: the script's folder's parent; give it when
# running a copy of the script from elsewhere).
cd "${REPO_ROOT:-$(dirname "$0")/..}" || exit 1
# shellcheck source=scripts/h200-run.sh
source scripts/h200-run.sh backward  # OUT, W, LOG, left, say
PROBLEMS=${PROBLEMS:-mixtral-8x7b,qwen3-30b}
TOKENS=${TOKENS:-4096,16384}
BUDGET_S=${BUDGET_S:-560}
PEERS_S=${PEERS_S:-180}
BW_BUDGET=${BW_BUDGET:-4}
PASS=${PASS:-both}
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache PYTHONUNBUFFERED=1
IFS=, read -ra problems <<<"$PROBLEMS"

F=
if [ -z "${SEARCH_JSON:-}" ]; then
  if ! cp "${FLYTUNE:-.device-carry/backward/flytune}" "$W/flytune"; then
    say "no flytune binary at ${FLYTUNE:-.device-carry/backward/flytune} (give FLYTUNE or SEARCH_JSON)"; exit 1
  fi
  chmod +x "$W/flytune" && F=$W/flytune
  echo "flytune: $("$F" --version 2>&1 | tr '\n' ' ')" >>"$LOG"
  echo "space: ${SPACE:-default}, --pass $PASS, backward --budget $BW_BUDGET" >>"$LOG"
fi
space=()
[ -n "${SPACE:-}" ] && space=(--space "$SPACE")

search() {  # problem share_s: the summary into $W/search_<problem>.json
  local json=$W/search_$1.json start=$SECONDS limit=$2
  if [ "$limit" -lt 30 ]; then say "search $1: skipped, $limit s left for it"; return 1; fi
  timeout -k 30 "$limit" "$F" search --problem "$1" --pass "$PASS" --tokens "$TOKENS" --db "$W/$1.db" --seed 42 \
    --graph --allow-missing --budget "$BW_BUDGET" --json --progress "${space[@]}" >"$json" 2>"$W/search_$1.log"
  local rc=$?
  say "search $1 rc=$rc in $((SECONDS - start)) s (limit $limit s): $(python3 - "$json" <<'EOF' 2>&1 | tail -1
import json, sys
d = json.load(open(sys.argv[1]))
layers = {(w["pass"], w["tokens"]): round(w["median_us"], 1) for w in d["winners"] if w["kind"] == "layer"}
print("interrupted" if d["interrupted"] else "finished", "; layer us", layers, "; missing", d["missing_layers"])
EOF
)"
}

flyjson=()
for i in "${!problems[@]}"; do
  p=${problems[$i]}
  if [ -n "${SEARCH_JSON:-}" ]; then
    cp "${SEARCH_JSON//\{name\}/$p}" "$W/search_$p.json" || say "no saved summary for $p"
  else
    search "$p" $(( ($(left) - PEERS_S) / (${#problems[@]} - i) ))
  fi
  [ -s "$W/search_$p.json" ] && flyjson+=(--flytune-json "$p=$W/search_$p.json")
done

peers=$(( $(left) - 10 ))
if [ "$peers" -gt 40 ]; then
  timeout -k 5 "$peers" python3 bench/backward_peers.py --problems "$PROBLEMS" --tokens "$TOKENS" \
    --out "$OUT/backward.md" --budget-s $((peers - 20)) "${flyjson[@]}" >>"$W/peers.log" 2>&1
  say "backward peers rc=$?: $(grep -E '^ceilings|Error|error' "$W/peers.log" | head -3 | tr '\n' ' ')"
else
  say "backward peers: skipped, $peers s left"
fi
(cd "$W" && tar czf "$OUT/backward.tar.gz" --exclude='*.db*' --exclude=flytune .)
say "done"
