#!/usr/bin/env bash
# Submits a flytune tuning campaign to Slurm (docs/CLUSTER.md): an array job
# with one `flytune search --shard I/N` per task and GPU (search-array.sbatch),
# and a job that starts once every task has succeeded (merge.sbatch: db merge,
# coverage check, export). The task -> (problem, shard, database) mapping is
# computed here, once, and written to DIR/plan.tsv, which both jobs read.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: submit.sh --problems FILE --shards N --dir DIR [options] [-- SEARCH ARGS...]

  --problems FILE        one problem a line: a preset name or a JSON problem file, optionally
                         followed by flytune's problem options (--experts E --hidden H --inter I
                         --topk K --dtype D --routing R); blank lines and # comments are skipped
  --shards N             shards per problem: the array has (problems x N) tasks
  --dir DIR              shared folder for plan.tsv, shard-*.db, merged.db, export/ and logs/
  --flytune PATH         the flytune binary, at a path every node sees (default: flytune on PATH)
  --gres SPEC            generic resources of one search task (default gpu:1; none for CPU-only searches)
  --coverage MODE        require (default): the merge job fails unless every requested token count
                         of every problem has a tuned layer winner; report: print the coverage only;
                         skip: no coverage check
  --coverage-tokens LIST token counts of the coverage check (default: the search's --tokens, else 1..16384)
  --export-arg ARG       one more argument of `flytune export` (repeatable), e.g. --export-arg=--check=gpu
  --no-export            merge (and check coverage) only
  --sbatch-arg ARG       one more sbatch option for both jobs (repeatable), e.g. --sbatch-arg=--partition=gpu
  --parsable             print only "ARRAY_JOB_ID MERGE_JOB_ID"
  -- SEARCH ARGS...      passed to every `flytune search` (e.g. --tokens 1..4096 --strategy exhaustive)
EOF
}
die() {
  echo "submit.sh: error: $*" >&2
  exit 1
}
usage_error() {
  echo "submit.sh: error: $* (see submit.sh --help)" >&2
  exit 2
}

problems_file="" shards="" dir="" flytune=flytune gres=gpu:1 coverage=require coverage_tokens="" export=1 parsable=0
export_args=() sbatch_args=() search_args=()
while [ $# -gt 0 ]; do
  arg=$1
  # --opt=value is --opt value
  if [[ $arg == --*=* ]]; then
    set -- "${arg%%=*}" "${arg#*=}" "${@:2}"
    arg=$1
  fi
  case $arg in
    -h | --help) usage; exit 0 ;;
    --no-export) export=0; shift; continue ;;
    --parsable) parsable=1; shift; continue ;;
    --) shift; search_args=("$@"); break ;;
    --problems | --shards | --dir | --flytune | --gres | --coverage | --coverage-tokens | --export-arg | --sbatch-arg)
      [ $# -ge 2 ] || usage_error "$arg needs a value" ;;
    *) usage_error "unknown argument '$arg'" ;;
  esac
  case $arg in
    --problems) problems_file=$2 ;;
    --shards) shards=$2 ;;
    --dir) dir=$2 ;;
    --flytune) flytune=$2 ;;
    --gres) gres=$2 ;;
    --coverage) coverage=$2 ;;
    --coverage-tokens) coverage_tokens=$2 ;;
    --export-arg) export_args+=("$2") ;;
    --sbatch-arg) sbatch_args+=("$2") ;;
  esac
  shift 2
done

[ -n "$problems_file" ] || usage_error "--problems FILE is required"
[ -n "$shards" ] || usage_error "--shards N is required"
[ -n "$dir" ] || usage_error "--dir DIR is required"
[[ $shards =~ ^[1-9][0-9]*$ ]] || usage_error "--shards: '$shards' is not a whole number >= 1"
case $coverage in require | report | skip) ;; *) usage_error "--coverage: '$coverage' is not require, report or skip" ;; esac
[ -r "$problems_file" ] || die "$problems_file: cannot read the problems file"
command -v sbatch >/dev/null || die "sbatch not found: run this on a Slurm login node"
flytune_path=$(command -v "$flytune") || die "$flytune: no such flytune binary (pass --flytune PATH)"
flytune_path=$(cd "$(dirname "$flytune_path")" && pwd)/$(basename "$flytune_path")

# The coverage check asks for the token counts the search searched.
if [ -z "$coverage_tokens" ]; then
  for ((i = 0; i < ${#search_args[@]}; i++)); do
    case ${search_args[i]} in
      --tokens) coverage_tokens=${search_args[i + 1]:-} ;;
      --tokens=*) coverage_tokens=${search_args[i]#--tokens=} ;;
    esac
  done
fi

mkdir -p "$dir/logs" || die "$dir: cannot create the folder"
dir=$(cd "$dir" && pwd)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# plan.tsv: task id, problem line, shard I/N, shard database. A problem's
# databases are named by its line, reduced to file-name characters.
plan=$dir/plan.tsv
tmp_plan=$(mktemp "$dir/plan.tsv.XXXXXX")
trap 'rm -f "$tmp_plan"' EXIT
printf '# task\tproblem\tshard\tdatabase (written by scripts/slurm/submit.sh)\n' >"$tmp_plan"
task=0 line_no=0
declare -A seen=()
while IFS= read -r line || [ -n "$line" ]; do
  line_no=$((line_no + 1))
  line=${line%%#*}
  read -ra words <<<"$line"
  [ ${#words[@]} -gt 0 ] || continue
  problem="${words[*]}"
  name=${problem// --/_}
  name=$(printf '%s' "$name" | tr -c 'A-Za-z0-9._-' '_' | tr -s '_')
  [ -z "${seen[$name]:-}" ] || die "$problems_file:$line_no: '$problem' gives the same database names as line ${seen[$name]}"
  seen[$name]=$line_no
  for ((i = 0; i < shards; i++)); do
    printf '%d\t%s\t%d/%d\t%s\n' "$task" "$problem" "$i" "$shards" "$dir/shard-$name-$i.db" >>"$tmp_plan"
    task=$((task + 1))
  done
done <"$problems_file"
[ "$task" -gt 0 ] || die "$problems_file: no problems in the file"
mv "$tmp_plan" "$plan"

array_id=$(sbatch --parsable --job-name=flytune-search --array="0-$((task - 1))" \
  --output="$dir/logs/search-%A_%a.out" --gres="$gres" "${sbatch_args[@]}" \
  "$here/search-array.sbatch" --flytune "$flytune_path" "$plan" -- "${search_args[@]}") ||
  die "sbatch refused the search array job"
array_id=${array_id%%;*}

merge_args=(--flytune "$flytune_path" --coverage "$coverage")
[ -z "$coverage_tokens" ] || merge_args+=(--coverage-tokens "$coverage_tokens")
[ "$export" -eq 1 ] || merge_args+=(--no-export)
merge_id=$(sbatch --parsable --job-name=flytune-merge --dependency="afterok:$array_id" --kill-on-invalid-dep=yes \
  --output="$dir/logs/merge-%j.out" "${sbatch_args[@]}" \
  "$here/merge.sbatch" "${merge_args[@]}" "$plan" -- "${export_args[@]}") || {
  scancel "$array_id" || true
  die "sbatch refused the merge job (the search array job $array_id was cancelled)"
}
merge_id=${merge_id%%;*}

if [ "$parsable" -eq 1 ]; then
  echo "$array_id $merge_id"
else
  echo "submitted search array job $array_id ($task tasks: $((task / shards)) problem(s) x $shards shard(s))"
  echo "submitted merge job $merge_id (runs once every search task has succeeded; cancelled if one fails)"
  echo "plan: $plan; logs: $dir/logs/; merged database: $dir/merged.db"
fi
