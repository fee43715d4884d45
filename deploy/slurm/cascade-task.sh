#!/bin/bash
# One Slurm task of a Cascade job (see cascade.sbatch): SLURM_PROCID 0 coordinates.
set -euo pipefail
PORT=${CASCADE_PORT:-50051}
WORKERS=$((SLURM_NTASKS - 1))
if [[ $SLURM_PROCID -eq 0 ]]; then
  exec "$CASCADE_BIN/cascade-coordinator" --model "$CASCADE_MODEL" \
    --listen "0.0.0.0:$PORT" --advertise "$CASCADE_COORDINATOR_HOST:$PORT" --workers "$WORKERS"
fi
HOST=$(hostname)
exec "$CASCADE_BIN/cascade-worker" --coordinator "$CASCADE_COORDINATOR_HOST:$PORT" \
  --listen "0.0.0.0:$((PORT + SLURM_PROCID))" --advertise "$HOST:$((PORT + SLURM_PROCID))" \
  --id "slurm-$SLURM_JOB_ID-$SLURM_PROCID" --threads "${SLURM_CPUS_ON_NODE:-1}"
