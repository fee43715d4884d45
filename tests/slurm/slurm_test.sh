#!/usr/bin/env bash
# A real one-node Slurm (munged, slurmctld, slurmd -N localhost) started here, in a
# temporary directory with its own ports and munge socket, runs the project's CPU sbatch
# scripts as shipped: deploy/slurm/cascade-mpi-cpu.sbatch with 4 tasks as two pretend nodes
# of TP 2, then deploy/slurm/cascade.sbatch (a coordinator and two workers); for each, a
# client gets a generation through the public API and `scancel --signal=TERM` drains the
# job, which must exit 0. The daemons are stopped on every path.
#
#   slurm_test.sh BIN_DIR SOURCE_DIR MODEL
#
# Exit 77 (skipped, with the reason) only when Slurm and munge are not installed and cannot
# be installed (scripts/setup.sh lists them); any other failure fails the test.
set -euo pipefail
BIN=$(realpath "$1")
SRC=$(realpath "$2")
MODEL=$(realpath "$3")
LIMIT=${CASCADE_SLURM_TEST_SECONDS:-240}

skip() { echo "SKIPPED: $*"; exit 77; }
need=()
for t in munged slurmctld slurmd sbatch srun scancel; do command -v "$t" >/dev/null || need+=("$t"); done
if ((${#need[@]})); then
  echo "slurm_test: ${need[*]} missing; installing slurm-wlm and munge"
  if [[ $(id -u) -ne 0 ]] || ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends slurm-wlm munge; } >/dev/null 2>&1; then
    skip "slurm-wlm and munge are not installed and could not be installed (needs root and the Debian archive)"
  fi
fi
[[ -x $BIN/cascade-mpi ]] || { echo "FAILED: $BIN/cascade-mpi is not built"; exit 1; }

DIR=$(mktemp -d /tmp/cascade-slurm.XXXXXX)
PIDS=()
cleanup() {
  local rc=$?
  [[ -n ${JOB:-} ]] && scancel "$JOB" >/dev/null 2>&1 || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  if ((rc != 0 && rc != 77)); then
    for f in "$DIR"/*.log "$DIR"/job-*.out; do [[ -f $f ]] && { echo "---- $f"; tail -n 60 "$f"; }; done
  fi
  rm -rf "$DIR"
  exit "$rc"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
CTLD_PORT=$(free_port)
SLURMD_PORT=$(free_port)
API_PORT=$(free_port)
HTTP_PORT=$(free_port)

# munge, on its own socket and key.
mkdir -p "$DIR/munge" "$DIR/state" "$DIR/spool"
chmod 700 "$DIR/munge"
dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$DIR/munge/munge.key"
munged --force --socket="$DIR/munge/munge.socket" --key-file="$DIR/munge/munge.key" \
  --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munged.log" \
  --seed-file="$DIR/munge/munged.seed"
for _ in $(seq 50); do [[ -f $DIR/munge/munged.pid ]] && break; sleep 0.1; done
PIDS+=("$(cat "$DIR/munge/munged.pid")")

# This machine as the cluster's one node, offering at least 8 CPUs whatever it has (the
# job's 4 tasks share its cores; config_overrides makes slurmd take the numbers as given).
CPUS=$(( $(nproc) > 8 ? $(nproc) : 8 ))
MEM=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
NODE="NodeName=localhost CPUs=$CPUS Boards=1 SocketsPerBoard=1 CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=$MEM"
cat > "$DIR/slurm.conf" <<CONF
ClusterName=cascadetest
SlurmctldHost=localhost
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=30
$NODE State=UNKNOWN
PartitionName=test Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
CONF
export SLURM_CONF=$DIR/slurm.conf
slurmctld -D -i -f "$SLURM_CONF" >>"$DIR/slurmctld.log" 2>&1 &
PIDS+=($!)
slurmd -D -N localhost -f "$SLURM_CONF" >>"$DIR/slurmd.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
  sinfo -h -o %T 2>/dev/null | grep -q -E '^(idle|mixed)' && break
  sleep 0.2
done
sinfo -h -o %T | grep -q -E '^(idle|mixed)' || { echo "FAILED: the node did not come up"; sinfo; exit 1; }

# run_job NAME SCRIPT SBATCH_OPTIONS... -- SCRIPT_ARGS...: submits the project's script,
# waits until the job serves (its address file written and the HTTP API healthy), has a
# client generate through the public gRPC API, drains it with SIGTERM and requires it to
# end COMPLETED with exit code 0.
run_job() {
  local name=$1 script=$2
  shift 2
  local opts=()
  while [[ $1 != -- ]]; do opts+=("$1"); shift; done
  shift
  cd "$DIR"
  JOB=$(sbatch --parsable "${opts[@]}" --output="$DIR/job-%j.out" "$SRC/deploy/slurm/$script" "$MODEL" "$@")
  echo "slurm_test: $name: job $JOB submitted ($script)"
  local address_file=$DIR/cascade-$JOB.address deadline=$((SECONDS + LIMIT)) state
  until [[ -s $address_file ]] && curl -sf "http://127.0.0.1:$HTTP_PORT/health" >/dev/null; do
    state=$(squeue -h -j "$JOB" -o %T 2>/dev/null || true)
    if [[ -z $state ]]; then echo "FAILED: $name: job $JOB ended before serving"; cat "$DIR/job-$JOB.out"; exit 1; fi
    ((SECONDS < deadline)) || { echo "FAILED: $name: job $JOB not serving after ${LIMIT}s (state $state)"; cat "$DIR/job-$JOB.out"; exit 1; }
    sleep 0.5
  done
  local address
  address=$(cat "$address_file")
  echo "slurm_test: $name: job $JOB serves on $address"

  # A client gets a generation through the public API (the address names the node).
  local out
  out=$("$BIN/cascade" generate --server "$address" --prompt "Once upon a time" --max-tokens 16 \
    --temperature 0)
  echo "slurm_test: $name: generated: $out"
  [[ $out == "Once upon a time"* && ${#out} -gt 20 ]] || { echo "FAILED: $name: no generation"; exit 1; }

  # Drain: every task gets SIGTERM; the job must end by itself with exit 0.
  scancel --signal=TERM "$JOB"
  until [[ -z $(squeue -h -j "$JOB" -o %T 2>/dev/null) ]]; do
    ((SECONDS < deadline)) || { echo "FAILED: $name: job $JOB still running after the drain"; exit 1; }
    sleep 0.5
  done
  local exit_code job_state
  exit_code=$(scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*ExitCode=\([0-9:]*\).*/\1/p' | head -n1)
  job_state=$(scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n1)
  echo "slurm_test: $name: job $JOB ended: state $job_state, exit code $exit_code"
  [[ $job_state == COMPLETED && $exit_code == 0:0 ]] || { echo "FAILED: $name: expected COMPLETED 0:0"; cat "$DIR/job-$JOB.out"; exit 1; }
  LAST_JOB=$JOB
  JOB=
}

export CASCADE_BIN=$BIN CASCADE_PORT=$API_PORT CASCADE_HTTP_PORT=$HTTP_PORT

# 1. The MPI script on CPUs: 4 tasks, two pretend nodes of TP 2.
run_job mpi cascade-mpi-cpu.sbatch --nodes=1 --ntasks=4 --ntasks-per-node=4 -- \
  --ranks-per-node 2 --tp 2 --control-listen 127.0.0.1:0 --quantized-activations false
grep -q "cascade-mpi: serving" "$DIR/job-$LAST_JOB.out" || { echo "FAILED: no serving line in the job output"; exit 1; }

# 2. The coordinator + workers script (no MPI): 3 tasks, a coordinator and two workers, on
# the one node (each worker on its own port from CASCADE_WORKER_PORT), run as shipped:
# found through CASCADE_DEPLOY_DIR since the job is submitted from elsewhere.
export CASCADE_CONTROL_PORT=$(free_port) CASCADE_WORKER_PORT=$(( $(free_port) - 1 ))
export CASCADE_DEPLOY_DIR=$SRC/deploy/slurm
run_job coordinator-workers cascade.sbatch --nodes=1 --ntasks=3 --cpus-per-task=1 -- --min-stages 2
grep -q "on 2 stage(s)" "$DIR/job-$LAST_JOB.out" || { echo "FAILED: the two workers did not serve as two stages"; cat "$DIR/job-$LAST_JOB.out"; exit 1; }
echo "slurm_test: passed"
