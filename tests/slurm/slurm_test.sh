#!/usr/bin/env bash
# A real one-node Slurm (munged, slurmctld, slurmd -N localhost) started here, in a
# temporary directory with its own ports and munge socket, runs the project's CPU sbatch
# script (deploy/slurm/cascade-mpi-cpu.sbatch) with 4 tasks as two pretend nodes of TP 2;
# a client gets a generation through the public API; `scancel --signal=TERM` drains the
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

# The project's CPU script: 4 tasks, two pretend nodes of TP 2.
cd "$DIR"
JOB=$(CASCADE_BIN=$BIN CASCADE_PORT=$API_PORT CASCADE_HTTP_PORT=$HTTP_PORT \
  sbatch --parsable --nodes=1 --ntasks=4 --ntasks-per-node=4 --output="$DIR/job-%j.out" \
    "$SRC/deploy/slurm/cascade-mpi-cpu.sbatch" "$MODEL" \
    --ranks-per-node 2 --tp 2 --control-listen 127.0.0.1:0 --quantized-activations false)
echo "slurm_test: job $JOB submitted"
ADDRESS_FILE=$DIR/cascade-$JOB.address
deadline=$((SECONDS + LIMIT))
until [[ -s $ADDRESS_FILE ]]; do
  state=$(squeue -h -j "$JOB" -o %T 2>/dev/null || true)
  if [[ -z $state ]]; then echo "FAILED: job $JOB ended before serving"; exit 1; fi
  ((SECONDS < deadline)) || { echo "FAILED: job $JOB not serving after ${LIMIT}s (state $state)"; exit 1; }
  sleep 0.5
done
ADDRESS=$(cat "$ADDRESS_FILE")
echo "slurm_test: job $JOB serves on $ADDRESS"

# A client gets a generation through the public API.
OUT=$("$BIN/cascade" generate --server "$ADDRESS" --prompt "Once upon a time" --max-tokens 16 \
  --temperature 0)
echo "slurm_test: generated: $OUT"
[[ $OUT == "Once upon a time"* && ${#OUT} -gt 20 ]] || { echo "FAILED: no generation"; exit 1; }

# Drain: every task gets SIGTERM; the job must end by itself with exit 0.
scancel --signal=TERM "$JOB"
until [[ -z $(squeue -h -j "$JOB" -o %T 2>/dev/null) ]]; do
  ((SECONDS < deadline)) || { echo "FAILED: job $JOB still running after the drain"; exit 1; }
  sleep 0.5
done
EXIT=$(scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*ExitCode=\([0-9:]*\).*/\1/p' | head -n1)
STATE=$(scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n1)
echo "slurm_test: job $JOB ended: state $STATE, exit code $EXIT"
[[ $STATE == COMPLETED && $EXIT == 0:0 ]] || { echo "FAILED: expected COMPLETED 0:0"; exit 1; }
grep -q "cascade-mpi: serving" "$DIR/job-$JOB.out" || { echo "FAILED: no serving line in the job output"; exit 1; }
JOB=
echo "slurm_test: passed"
