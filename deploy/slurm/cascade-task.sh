#!/bin/bash
# One Slurm task of a Cascade job (see cascade.sbatch): SLURM_PROCID 0 coordinates, every
# other task is a worker. Arguments go to the coordinator.
set -euo pipefail
PORT=${CASCADE_PORT:-50051}                  # public gRPC API
CONTROL_PORT=${CASCADE_CONTROL_PORT:-50053}  # workers register here
HTTP_PORT=${CASCADE_HTTP_PORT:-8080}         # OpenAI-compatible HTTP API
WORKER_PORT=${CASCADE_WORKER_PORT:-50100}    # + the task number: each worker's own port
WORKERS=$((SLURM_NTASKS - 1))
if [[ $SLURM_PROCID -eq 0 ]]; then
  echo "$CASCADE_COORDINATOR_HOST:$PORT" > "$CASCADE_ADDRESS_FILE"
  exec "$CASCADE_BIN/cascade-coordinator" --model "$CASCADE_MODEL" --workers "$WORKERS" \
    --listen "0.0.0.0:$PORT" --http-listen "0.0.0.0:$HTTP_PORT" \
    --control-listen "0.0.0.0:$CONTROL_PORT" --advertise "$CASCADE_COORDINATOR_HOST:$CONTROL_PORT" "$@"
fi
HOST=$(hostname)
exec "$CASCADE_BIN/cascade-worker" --coordinator "$CASCADE_COORDINATOR_HOST:$CONTROL_PORT" \
  --listen "0.0.0.0:$((WORKER_PORT + SLURM_PROCID))" --advertise "$HOST:$((WORKER_PORT + SLURM_PROCID))" \
  --id "slurm-$SLURM_JOB_ID-$SLURM_PROCID" --threads "${SLURM_CPUS_PER_TASK:-1}"
