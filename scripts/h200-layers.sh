#!/usr/bin/env bash
# Layer winners searched, exported and checked through the runtime on the H200
# (issue 14). From a build made on the Debian machine:
#   scripts/h200-layers.sh BUILD_DIR forms                 the small recorded database whose
#       layer winners cover every launch form (tests/data/tiny_forms.db)
#   scripts/h200-layers.sh BUILD_DIR suite PROBLEM...       search T = 1..16384 per problem,
#       export, flytune check-export (every bucket, T below/between/above, five routings)
# PROBLEM: a preset name, or name:E:H:I:K for a custom shape. Logs go to $OUT.
set -uo pipefail
B=${1:?build dir}
PART=${2:?part}
shift 2
OUT=${OUT:-/tmp/flytune-h200}
mkdir -p "$OUT"
F=$B/cli/flytune
export FLYTUNE_CACHE_DIR=/tmp/flytune-cache
TOKENS=1,16,64,512,4096,16384

problem_args() {  # preset or name:E:H:I:K
  IFS=: read -r name e h i k <<<"$1"
  if [ -n "${k:-}" ]; then echo "--experts $e --hidden $h --inter $i --topk $k"; else echo "--problem $name"; fi
}

case "$PART" in
forms)
  db=/tmp/tiny_forms.db
  rm -f "$db"*
  # Each run forces launch forms through --space; their winners share one database.
  run() {  # tokens space
    "$F" search --problem tiny --tokens "$1" --space "$2" --db "$db" --seed 7 --strategy exhaustive --no-baseline \
      >> "$OUT/forms.txt" 2>&1
    echo "forms T=$1 rc=$?"
  }
  run 1,33 "atom=mma_m16n8k16_f32_bf16;layout=shuffled;reduce=partials;split_k=1;tile_m=16,32"
  run 16,64 "atom=wgmma_m64k16_f32_bf16;wgmma_producer=on;wgmma_tiles=8;split_k=2;wgmma_tile_m=64;wgmma_warps=4x1"
  run 128 "atom=wgmma_m64k16_f32_bf16;wgmma_producer=off;wgmma_tiles=1;weight=stage1"
  run 256 "atom=mma_m16n8k16_f32_bf16;layout=plain,shuffled;reduce=atomic,partials;split_k=1,4"
  # Keep the code objects the winners and the support unit need (the rest of
  # the search's history stays, without its bytes), so the file fits in tests/data.
  python3 - "$db" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
c.execute("""DELETE FROM code_objects WHERE hash NOT IN (
  SELECT code_object_hash FROM variants WHERE kind = 'support' AND code_object_hash IS NOT NULL
  UNION SELECT v.code_object_hash FROM variants v JOIN variants l ON l.kind = 'layer'
    AND v.kernel_name IN (json_extract(l.params_json, '$.stage1_kernel'), json_extract(l.params_json, '$.stage2_kernel'))
    JOIN winners w ON w.variant_id = l.id WHERE v.code_object_hash IS NOT NULL)""")
c.commit(); c.execute("PRAGMA wal_checkpoint(TRUNCATE)"); c.execute("VACUUM"); c.close()
PY
  "$F" db --db "$db" snapshot "$OUT/tiny_forms_snapshot.db" && echo snapshot ok
  ls -la "$OUT/tiny_forms_snapshot.db"
  "$F" export --db "$OUT/tiny_forms_snapshot.db" --out /tmp/tiny-export --force --check gpu >> "$OUT/forms.txt" 2>&1
  echo "export rc=$?"; tail -4 "$OUT/forms.txt"
  grep -E "^ +[0-9]+ layer|no layer winner" "$OUT/forms.txt"
  rm -f "$db"*
  ;;
suite)
  for p in "$@"; do
    name=${p%%:*}
    db=/tmp/$name.db
    start=$(date +%s)
    # shellcheck disable=SC2046
    "$F" search $(problem_args "$p") --tokens $TOKENS --db "$db" --seed 42 > "$OUT/$name-search.txt" 2>&1
    echo "$name search rc=$? $(( $(date +%s) - start ))s"
    grep -E "^ +[0-9]+ layer|no layer winner" "$OUT/$name-search.txt"
    "$F" export --db "$db" --out "/tmp/$name-export" --force --no-check >> "$OUT/$name-search.txt" 2>&1
    echo "$name export rc=$?"
    start=$(date +%s)
    "$F" check-export "/tmp/$name-export" ${ROUTINGS:+--routing $ROUTINGS} > "$OUT/$name-check.txt" 2>&1
    echo "$name check-export rc=$? $(( $(date +%s) - start ))s: $(tail -1 "$OUT/$name-check.txt")"
    grep FAIL "$OUT/$name-check.txt" | head -5
  done
  ;;
esac
