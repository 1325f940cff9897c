#!/usr/bin/env bash
# The Slurm path of docs/CLUSTER.md on a one-node cluster of this machine: munged,
# slurmctld and slurmd (Debian's munge and slurm-wlm) started here with their own
# key, configuration, state, spool and logs under WORK, then scripts/slurm/submit.sh
# submits the search array job (problems x shards) and the dependent merge job.
# Checks: every array task completed, the merge job ended as expected, and the
# merged database holds every shard's run and rows. Every daemon it started is
# stopped on exit. Exits 125 (skipped) when it cannot run here (not root, a
# package missing), unless FLYTUNE_EXPECT_SLURM=1 (scripts/test.sh as root).
# usage: slurm_test.sh FLYTUNE_BINARY WORK_DIR
set -euo pipefail

flytune=$1
work_root=$2
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
timeout_s=${FLYTUNE_SLURM_TEST_TIMEOUT:-420}
shards=2
# The searches: dry runs record compile results and no winners, so the merge
# job's coverage check must fail (expect_winners=0); with searches that time
# kernels, every bucket has a winner and the merge job exports (expect_winners=1).
search_args=(--dry-run --target sm_90a --space small)
expect_winners=0

say() { echo "slurm-test: $*"; }
fail() {
  echo "slurm-test: FAIL: $*" >&2
  exit 1
}
skip() {
  if [ "${FLYTUNE_EXPECT_SLURM:-0}" = 1 ]; then
    fail "cannot run, but FLYTUNE_EXPECT_SLURM=1: $*"
  fi
  echo "skipped: $*"
  exit 125
}

[ "$(id -u)" -eq 0 ] || skip "not root (slurmd runs jobs as their user and must be root)"
for c in munged munge slurmctld slurmd sbatch squeue scontrol scancel sinfo sqlite3; do
  command -v "$c" >/dev/null || skip "$c not found (apt-get install slurm-wlm munge sqlite3, or bash scripts/setup.sh)"
done
[ -x "$flytune" ] || fail "$flytune: no flytune binary"

mkdir -p "$work_root"
# The searches' compile cache lives in the build tree (the jobs inherit the variable), so the
# test neither reads nor fills the user's; later runs of the test compile nothing again.
export FLYTUNE_CACHE_DIR=$work_root/compile-cache
work=$(mktemp -d "$work_root/run.XXXXXX")
chmod 755 "$work"
mkdir -p "$work/munge" "$work/state" "$work/spool" "$work/log"
chmod 755 "$work/munge"  # munged: the socket's folder must be searchable by all

pids=()  # daemons started here, in order
# A daemon that exited but was not reaped yet (a zombie) counts as stopped.
alive() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$(cut -d ' ' -f 1 <<<"${stat##*) }")" != Z ]
}
stop_all() {
  local rc=$? p i
  set +e
  if [ -n "${SLURM_CONF:-}" ] && [ -f "$work/slurmctld.pid" ]; then
    # Cancel what is left, let the job steps end, then shut both slurm daemons down.
    mapfile -t left < <(squeue -h -o %A 2>/dev/null)
    [ ${#left[@]} -eq 0 ] || scancel "${left[@]}" 2>/dev/null
    for ((i = 0; i < 20; i++)); do
      [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break
      sleep 0.5
    done
    scontrol shutdown >/dev/null 2>&1
  fi
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    p=${pids[i]}
    [ "$p" = munged ] && p=$(cat "$work/munge/munged.pid" 2>/dev/null)
    [ -n "$p" ] || continue
    alive "$p" || continue
    kill -TERM "$p" 2>/dev/null
    for ((w = 0; w < 40; w++)); do alive "$p" || break; sleep 0.25; done
    if alive "$p"; then
      echo "slurm-test: pid $p did not stop on SIGTERM; killing it" >&2
      kill -KILL "$p" 2>/dev/null
      rc=1
    fi
  done
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 125 ]; then
    for f in "$work"/log/*.log; do
      [ -f "$f" ] || continue
      echo "---- last lines of $f" >&2
      tail -n 15 "$f" >&2
    done
    echo "slurm-test: everything is kept in $work" >&2
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap stop_all EXIT
trap 'exit 1' INT TERM HUP

# Two free TCP ports for slurmctld and slurmd.
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
ports=()
for ((p = 20000 + $$ % 20000; ${#ports[@]} < 2 && p < 65000; p++)); do
  port_free "$p" && ports+=("$p")
done
[ ${#ports[@]} -eq 2 ] || fail "no free TCP ports for slurmctld and slurmd"

# munge: a fresh key, our own socket. --force: munged refuses a key under a group- or
# world-writable folder (a CI checkout may sit under one); this key lives for one test.
head -c 1024 /dev/urandom >"$work/munge/munge.key"
chmod 400 "$work/munge/munge.key"
munge_socket=$work/munge/munge.socket
munged --force --socket="$munge_socket" --key-file="$work/munge/munge.key" --pid-file="$work/munge/munged.pid" \
  --seed-file="$work/munge/munged.seed" --log-file="$work/log/munged.log" ||
  fail "munged did not start (log: $work/log/munged.log)"
pids+=(munged)
munge -n -S "$munge_socket" | unmunge -S "$munge_socket" >/dev/null || fail "munge cannot encode and decode a credential"

cat >"$work/slurm.conf" <<EOF
# A one-node cluster for tests/slurm, without systemd or cgroups.
ClusterName=flytune-test
SlurmctldHost=localhost
SlurmctldPort=${ports[0]}
SlurmdPort=${ports[1]}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$munge_socket
CredType=cred/munge
StateSaveLocation=$work/state
SlurmdSpoolDir=$work/spool
SlurmctldPidFile=$work/slurmctld.pid
SlurmdPidFile=$work/slurmd.pid
SlurmctldLogFile=$work/log/slurmctld.log
SlurmdLogFile=$work/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
MinJobAge=600
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=flytune Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$work/slurm.conf

# The daemons fork into the background and write their pid files.
pid_of() {
  local i
  for ((i = 0; i < 40; i++)); do
    [ -s "$1" ] && cat "$1" && return 0
    sleep 0.25
  done
  return 1
}
slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start"
pids+=("$(pid_of "$work/slurmctld.pid")") || fail "slurmctld wrote no pid file"
slurmd -f "$SLURM_CONF" -N localhost || fail "slurmd did not start"
pids+=("$(pid_of "$work/slurmd.pid")") || fail "slurmd wrote no pid file"
for ((i = 0; i < 60; i++)); do
  state=$(sinfo -h -n localhost -o %T 2>/dev/null || true)
  [ "$state" = idle ] && break
  sleep 0.5
done
[ "$state" = idle ] || fail "the node did not become idle within 30 s (state '$state')"
say "cluster up: slurmctld :${ports[0]}, slurmd :${ports[1]}, $(nproc) CPUs"

# Two problems: a preset, and the preset with problem options of its own.
cat >"$work/problems.txt" <<'EOF'
# problems of the test campaign
tiny

tiny --experts 8   # a second shape
EOF
start=$SECONDS
submit() { bash "$repo/scripts/slurm/submit.sh" --parsable --flytune "$flytune" --gres none "$@"; }
# A campaign whose search fails: its merge job must be cancelled, not left pending.
echo no-such-problem >"$work/bad-problems.txt"
read -r bad_array_id bad_merge_id < <(submit --problems "$work/bad-problems.txt" --shards 1 --dir "$work/bad" \
  -- "${search_args[@]}") || fail "submit.sh failed"
[ -n "${bad_merge_id:-}" ] || fail "submit.sh did not print the two job ids"
run=$work/campaign
read -r array_id merge_id < <(submit --problems "$work/problems.txt" --shards "$shards" --dir "$run" \
  -- "${search_args[@]}") || fail "submit.sh failed"
[ -n "${merge_id:-}" ] || fail "submit.sh did not print the two job ids"
say "submitted array job $array_id and merge job $merge_id (and $bad_array_id, $bad_merge_id, which must fail)"
# A campaign that times kernels: searches on the CPU emulator (the tiny problem, a
# four-variant space, one bucket a shard), so every bucket gets winners and the merge
# job checks coverage, exports, and checks the export on the emulator.
emu_run=$work/emulated
echo tiny >"$work/emu-problems.txt"
read -r emu_array_id emu_merge_id < <(submit --problems "$work/emu-problems.txt" --shards 2 --dir "$emu_run" \
  --coverage-tokens 1,7 --export-arg=--check=emulate \
  -- --emulate --target sm_90a --space "small;atom=mma_m16n8k16_f32_bf16;split_k=1;tile_m=32;tile_n=32,64" \
  --tokens 1,7 --no-baseline --seed 7) || fail "submit.sh failed"
[ -n "${emu_merge_id:-}" ] || fail "submit.sh did not print the two job ids"
say "submitted the emulated campaign: array job $emu_array_id, merge job $emu_merge_id"

job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
while [ -n "$(squeue -h -j "$array_id,$merge_id,$bad_array_id,$bad_merge_id,$emu_array_id,$emu_merge_id" -o %A 2>/dev/null)" ]; do
  [ $((SECONDS - start)) -lt "$timeout_s" ] || fail "the jobs did not finish within $timeout_s s: $(squeue -h 2>&1 | tr '\n' ';')"
  sleep 1
done
say "the jobs left the queue after $((SECONDS - start)) s"

state=$(job_state "$bad_array_id")
[ "$state" = FAILED ] || fail "the search task of 'no-such-problem' ended '$state', expected FAILED"
state=$(job_state "$bad_merge_id")
[ "$state" = CANCELLED ] || fail "the merge job after a failed search ended '$state', expected CANCELLED"

# Every array task completed.
mapfile -t task_states < <(job_state "$array_id")
tasks=$((2 * shards))
[ ${#task_states[@]} -eq "$tasks" ] || fail "array job $array_id has ${#task_states[@]} task records, expected $tasks"
for s in "${task_states[@]}"; do
  [ "$s" = COMPLETED ] || fail "an array task ended $s: $(cat "$run"/logs/search-*.out)"
done

merge_log=$run/logs/merge-$merge_id.out
[ -f "$merge_log" ] || fail "the merge job wrote no log ($merge_log)"
merge_state=$(job_state "$merge_id")
if [ "$expect_winners" -eq 1 ]; then
  [ "$merge_state" = COMPLETED ] || fail "the merge job ended $merge_state: $(cat "$merge_log")"
  [ -f "$run/export/manifest.json" ] || fail "the merge job wrote no export/manifest.json"
else
  [ "$merge_state" = FAILED ] || fail "the merge job ended '$merge_state', expected FAILED at the coverage check: $(cat "$merge_log")"
  grep -q '^coverage: the database has no winners' "$merge_log" || fail "the merge log has no coverage report: $(cat "$merge_log")"
  grep -q '^merge.sbatch: error: coverage: ' "$merge_log" || fail "the merge job did not fail at the coverage check: $(cat "$merge_log")"
  [ ! -e "$run/export" ] || fail "the merge job exported although the coverage check failed"
fi

# The merged database: one run per shard database, each with its shard label,
# and every shard's variants and code objects.
merged=$run/merged.db
[ -f "$merged" ] || fail "no merged database $merged"
mapfile -t shard_dbs < <(grep -v '^#' "$run/plan.tsv" | cut -f4)
[ ${#shard_dbs[@]} -eq "$tasks" ] || fail "plan.tsv has ${#shard_dbs[@]} rows, expected $tasks"
q() { sqlite3 -batch -noheader "$@"; }
variants=0 measurements=0
for db in "${shard_dbs[@]}"; do
  [ -f "$db" ] || fail "shard database $db is missing (tiny has more buckets than $shards shards)"
  read -r started host shard < <(q -separator ' ' "$db" "SELECT started_at, hostname, json_extract(options_json, '\$.shard') FROM runs")
  [ -n "${shard:-}" ] || fail "$db: its run records no shard"
  run_of_shard="started_at = '$started' AND hostname = '$host' AND json_extract(options_json, '\$.shard') = '$shard'"
  n=$(q "$merged" "SELECT count(*) FROM runs WHERE $run_of_shard")
  [ "$n" -eq 1 ] || fail "$merged has $n runs of $db (shard $shard), expected 1"
  missing=$(q "$merged" "ATTACH '$db' AS s; SELECT count(*) FROM s.variants v WHERE NOT EXISTS
    (SELECT 1 FROM main.variants m WHERE m.kernel_name = v.kernel_name AND m.target = v.target
     AND m.code_object_hash IS v.code_object_hash)")
  [ "$missing" -eq 0 ] || fail "$merged lacks $missing variant(s) of $db"
  missing=$(q "$merged" "ATTACH '$db' AS s; SELECT count(*) FROM s.code_objects c WHERE NOT EXISTS
    (SELECT 1 FROM main.code_objects m WHERE m.hash = c.hash)")
  [ "$missing" -eq 0 ] || fail "$merged lacks $missing code object(s) of $db"
  here=$(q "$db" "SELECT count(*) FROM measurements")
  there=$(q "$merged" "SELECT count(*) FROM measurements WHERE run_id = (SELECT id FROM runs WHERE $run_of_shard)")
  [ "$here" -eq "$there" ] || fail "$merged has $there measurements of $db's run, the shard has $here"
  variants=$((variants + $(q "$db" "SELECT count(*) FROM variants")))
  measurements=$((measurements + here))
done
runs=$(q "$merged" "SELECT count(*) FROM runs")
[ "$runs" -eq "$tasks" ] || fail "$merged has $runs runs, expected $tasks (one per shard)"
problems=$(q "$merged" "SELECT count(DISTINCT key) FROM problems")
[ "$problems" -eq 2 ] || fail "$merged has $problems problems, expected 2"
[ "$variants" -gt 0 ] || fail "the shards recorded no variants"
grep -h '^run 1' "$run"/logs/search-*.out | sed 's/^/slurm-test: search: /'
tail -n 1 "$merge_log" | sed 's/^/slurm-test: merge job: /'
# The emulated campaign: both shards searched, merged with a layer winner for each
# bucket, exported and checked on the emulator by the merge job.
mapfile -t emu_states < <(job_state "$emu_array_id")
[ ${#emu_states[@]} -eq 2 ] || fail "array job $emu_array_id has ${#emu_states[@]} task records, expected 2"
for s in "${emu_states[@]}"; do
  [ "$s" = COMPLETED ] || fail "an emulated search task ended $s: $(cat "$emu_run"/logs/search-*.out)"
done
emu_log=$emu_run/logs/merge-$emu_merge_id.out
state=$(job_state "$emu_merge_id")
[ "$state" = COMPLETED ] || fail "the emulated campaign's merge job ended '$state': $(cat "$emu_log" 2>/dev/null)"
[ -f "$emu_run/export/manifest.json" ] || fail "the emulated campaign's merge job wrote no export/manifest.json"
grep -q 'checks passed' "$emu_log" || fail "the merge job's export was not checked: $(cat "$emu_log")"
layers=$(q "$emu_run/merged.db" "SELECT group_concat(tokens) FROM (SELECT tokens FROM winners WHERE kind = 'layer' ORDER BY tokens)")
[ "$layers" = "1,7" ] || fail "$emu_run/merged.db has layer winners for T = '$layers', expected 1,7"
runs=$(q "$emu_run/merged.db" "SELECT count(*) FROM runs WHERE json_extract(options_json, '\$.shard') IN ('0/2', '1/2')")
[ "$runs" -eq 2 ] || fail "$emu_run/merged.db has $runs shard runs, expected 2"
grep -h 'checks passed' "$emu_log" | sed 's/^/slurm-test: emulated campaign: /'

say "ok: $tasks search tasks, merge job $merge_state as expected; $merged holds every shard's run, variants, code objects and measurements ($variants variant rows, $measurements measurements in the shards; $((SECONDS - start)) s)"
