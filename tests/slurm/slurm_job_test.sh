#!/usr/bin/env bash
# scripts/slurm/tandem.sbatch on a real Slurm (Debian's slurm-wlm and munge, scripts/setup.sh):
# a private munged, slurmctld and three slurmd on this host (nodes 127.0.0.1..3, one per
# component of the heterogeneous job), the job submitted with sbatch. Worker 1 is killed with
# SIGKILL mid-run and restarted in its task (it rolls forward); killed again, it has used up its
# restarts (TANDEM_MAX_RESTARTS=1), stops the job, and the job requeues itself and resumes from
# its last checkpoint. The job's model_checksum must equal `tandem local`'s on the same config.
# Needs root (slurmd runs jobs as their user). Everything started here is stopped by its pid.
# Usage: slurm_job_test.sh SOURCE_DIR TANDEM_BINARY (SLURM_TEST_KEEP=1 keeps the files)
set -euo pipefail
src=$1
tandem=$2
steps=${SLURM_TEST_STEPS:-1500}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
for tool in munged slurmctld slurmd sbatch sinfo squeue scancel python3; do
  command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] ||
    fail "$tool is missing: scripts/setup.sh test installs slurm-wlm and munge"
done
[[ $(id -u) == 0 ]] || fail "needs root: slurmd starts the job's tasks as the job's user"
PATH=$PATH:/usr/sbin

tmp=$(mktemp -d /tmp/tandem-slurm-test.XXXXXX)
pids=()
job_id=""
cleanup() {
  local rc=$?
  if [[ -n $job_id ]]; then
    scancel "$job_id" 2>/dev/null || true
    # scancel returns at once; the members (daemonized under slurmstepd, not our children) are
    # waited for, and whatever is left of them is killed by its command line (our temp dir).
    for _ in $(seq 100); do
      [[ -z $(squeue -h -j "$job_id" 2>/dev/null) ]] && break
      sleep 0.2
    done
    pkill -KILL -f -- "--ready-file $tmp/" 2>/dev/null || true
  fi
  # slurmd first (it ends the job's steps), then slurmctld, then munged; each by its pid.
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[i]}" 2>/dev/null || true; done
  if [[ -f $tmp/munge/munged.pid ]]; then kill -TERM "$(cat "$tmp/munge/munged.pid")" 2>/dev/null || true; fi
  for _ in $(seq 50); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if ((rc != 0)) || [[ -n ${SLURM_TEST_KEEP:-} ]]; then
    echo "(test files kept in $tmp)" >&2
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

dump_logs() {
  for f in "$tmp"/slurm/*.log "$tmp"/slurm/*.out "$tmp"/munge/munged.log "$tmp"/job/sbatch.out \
    "$tmp"/job/logs/*.log; do
    [[ -f $f ]] || continue
    echo "----- $f (last 40 lines)" >&2
    tail -n 40 "$f" >&2
  done
}

# Free TCP ports: N consecutive ones, free on every address.
free_ports() {
  python3 - "$1" <<'EOF'
import random, socket, sys
n = int(sys.argv[1])
for _ in range(500):
    base = random.randint(20000, 60000 - n)
    socks = []
    try:
        for p in range(base, base + n):
            s = socket.socket()
            s.bind(("0.0.0.0", p))
            socks.append(s)
        print(base)
        sys.exit(0)
    except OSError:
        pass
    finally:
        for s in socks:
            s.close()
sys.exit("no free port range")
EOF
}

# --- munge: a key of our own and a private socket ---
mkdir -p "$tmp/munge" "$tmp/slurm/state" "$tmp/slurm/spool" "$tmp/job"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.socket" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/munged.seed" --force ||
  { dump_logs; fail "munged did not start"; }

# --- Slurm: one controller, three nodes named by loopback addresses, all on this host ---
ctld_port=$(free_ports 1)
slurmd_port=$(free_ports 3)
tandem_port=$(free_ports 5)
host=$(hostname -s)
conf=$tmp/slurm/slurm.conf
cat >"$conf" <<EOF
ClusterName=tandemtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job starts again after this many seconds (default 120).
AuthInfo=socket=$tmp/munge/munge.socket,cred_expire=5
CredType=cred/munge
MpiDefault=none
# No cgroups (a container may not delegate them): processes tracked by their parents.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# More CPUs than this machine has: three nodes on one host.
SlurmdParameters=config_overrides
ReturnToService=2
SchedulerParameters=bf_interval=1
StateSaveLocation=$tmp/slurm/state
SlurmdSpoolDir=$tmp/slurm/spool/%n
SlurmctldPidFile=$tmp/slurm/slurmctld.pid
SlurmdPidFile=$tmp/slurm/slurmd.%n.pid
SlurmctldLogFile=$tmp/slurm/slurmctld.log
SlurmdLogFile=$tmp/slurm/slurmd.%n.log
SlurmctldDebug=info
SlurmdDebug=info
# Heterogeneous jobs are started by the backfill scheduler, which plans whole nodes per
# component: one node per component. Named by loopback addresses, which tandem's daemons bind.
NodeName=127.0.0.[1-3] NodeHostname=$host NodeAddr=127.0.0.1 Port=[$slurmd_port-$((slurmd_port + 2))] CPUs=8 State=UNKNOWN
PartitionName=test Nodes=127.0.0.[1-3] Default=YES DefaultTime=10 MaxTime=60 State=UP OverSubscribe=YES
EOF
export SLURM_CONF=$conf
slurmctld -D -f "$conf" >"$tmp/slurm/slurmctld.out" 2>&1 &
pids+=($!)
for n in 1 2 3; do
  slurmd -D -N "127.0.0.$n" -f "$conf" >"$tmp/slurm/slurmd$n.out" 2>&1 &
  pids+=($!)
done
idle=0
for _ in $(seq 60); do
  idle=$(sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle' || true)
  ((idle == 3)) && break
  sleep 1
done
((idle == 3)) || { sinfo -N >&2 || true; dump_logs; fail "Slurm did not come up: $idle of 3 nodes idle after 60 s"; }
echo "slurm up: $(sinfo -h -o '%D nodes %T %N')"

# --- the job ---
job=$tmp/job
cat >"$job/job.yaml" <<EOF
model:
  embedding_dim: 8
  bottom_mlp: [32, 8]
  top_mlp: [32, 1]
tables:
  default: {optimizer: adagrad, lr: 0.3, init: {dist: uniform, scale: 0.01}}
data:
  format: synthetic
  num_categorical: 26
  synthetic: {vocab: 200, zipf: 1.1, eval_rows: 4000}
train:
  steps: $steps
  batch_size: 128
  seed: 7
  dense_optimizer: adam
  dense_lr: 0.01
  log_every_steps: 50
ps: {data_dir: $job/ps, storage: memory}
chief: {heartbeat_interval_ms: 200, heartbeat_timeout_ms: 5000}
collective: {timeout_ms: 20000}
checkpoint: {dir: $job/ckpt, every_steps: 200}
output: {dir: $job/out}
EOF
start=$SECONDS
job_id=$(cd "$job" && TANDEM=$tandem TANDEM_SLURM_BASE_PORT=$tandem_port TANDEM_LOG_DIR=$job/logs \
  TANDEM_MAX_RESTARTS=1 TANDEM_MAX_REQUEUES=1 \
  sbatch --parsable -o "$job/sbatch.out" "$src/scripts/slurm/tandem.sbatch" "$job/job.yaml")
job_id=${job_id%%;*}
echo "submitted job $job_id"
job_state() { squeue -h -j "$job_id" -o %T 2>/dev/null | head -1; }
step_now() { { grep -o '"step":[0-9]*' "$job/out/metrics.jsonl" 2>/dev/null || true; } | tail -1 | cut -d: -f2; }
ready_pid() {
  python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' "$job/logs/worker-1.ready" 2>/dev/null || true
}

# The faults: SIGKILL worker 1 past step 200 (restarted in its task, it rolls forward), and its
# restarted process again past step 600 (no restart left: it stops the job, which requeues).
kills=()
killed_pid=""
deadline=$((SECONDS + 200))
while ((SECONDS < deadline)); do
  state=$(job_state)
  [[ -n $state ]] || break
  if [[ $state == PENDING ]]; then
    # Requeued: the backfill scheduler runs on changes only; any update wakes it.
    scontrol update JobId="$job_id" Comment=requeued >/dev/null 2>&1 || true
  elif ((${#kills[@]} < 2)); then
    s=$(step_now)
    pid=$(ready_pid)
    want=$((${#kills[@]} == 0 ? 200 : 600))
    if [[ -n $s && -n $pid && $pid != "$killed_pid" && $s -ge $want ]] && kill -KILL "$pid" 2>/dev/null; then
      kills+=("$s")
      killed_pid=$pid
      echo "killed worker 1 (pid $pid) at step $s"
    fi
  fi
  sleep 0.2
done
[[ -z $(job_state) ]] || { squeue >&2; dump_logs; fail "job $job_id not done after 200 s"; }
echo "job $job_id ended after $((SECONDS - start)) s"
cat "$job/sbatch.out"
((${#kills[@]} == 2)) || { dump_logs; fail "the job ended before worker 1 was killed twice (raise SLURM_TEST_STEPS)"; }
grep -q 'worker:1 exited 137: restart 1 of 1' "$job/logs/worker-1.log" ||
  { dump_logs; fail "worker 1 was not restarted in its task"; }
grep -q 'worker:1 exited 137: 1 restarts already: stopping the job' "$job/logs/worker-1.log" ||
  { dump_logs; fail "worker 1 did not stop the job once its restarts were used up"; }
grep -q 'requeueing the job (1 of 1)' "$job/sbatch.out" || { dump_logs; fail "the job was not requeued"; }
grep -q '(start 2)' "$job/sbatch.out" || { dump_logs; fail "the requeued job did not start again"; }
grep -q 'job done' "$job/sbatch.out" || { dump_logs; fail "the Slurm job failed"; }
slurm_sum=$(grep '"final":true' "$job/out/metrics.jsonl" | grep -o '"model_checksum":"[0-9a-f]*"' | cut -d'"' -f4)
[[ -n $slurm_sum ]] || { dump_logs; fail "no final model_checksum in $job/out/metrics.jsonl"; }

# --- the same job under `tandem local` ---
local_dir=$tmp/local
mkdir -p "$local_dir"
"$tandem" local --config "$job/job.yaml" --ps 2 --workers 2 --set ps.data_dir="$local_dir/ps" \
  --set checkpoint.dir="$local_dir/ckpt" --set output.dir="$local_dir/out" >"$local_dir/local.out" 2>&1 ||
  { tail -n 40 "$local_dir/local.out" >&2; fail "tandem local failed"; }
local_sum=$(grep '"final":true' "$local_dir/out/metrics.jsonl" | grep -o '"model_checksum":"[0-9a-f]*"' | cut -d'"' -f4)
echo "model_checksum: slurm $slurm_sum (worker 1 killed at steps ${kills[*]}, job requeued), local $local_sum"
[[ $slurm_sum == "$local_sum" ]] || fail "the Slurm job's model_checksum differs from tandem local's"
echo "PASS ($((SECONDS)) s)"
