#!/usr/bin/env bash
# The coordinator computes nothing on weights, so its binary must not carry the engine,
# the kernels or CUDA: no symbol of theirs in cascade-coordinator, no CUDA library among
# what it loads. cascade-worker, which does carry them, is the control that shows the
# check can see them.
#   tests/link_check.sh BIN_DIR
set -euo pipefail
bin=$1
# Symbols that only the engine, the kernels and the CUDA runtime define.
pattern='cascade::(Stage|KvCache|CpuBackend|CudaBackend|ThreadPool|StageExecutor)::|cascade::MakeBackend|cascade::.*KernelTable|cascade::ListGpus|\bcuda[A-Z][A-Za-z]*\b|\bnccl[A-Z]|\bcublas[A-Z]'
found() { nm -C --defined-only "$1" 2>/dev/null | grep -E "$pattern" || true; }

worker=$(found "$bin/cascade-worker" | wc -l)
if [[ $worker -eq 0 ]]; then
  echo "link check is blind: cascade-worker shows no engine or kernel symbols" >&2
  exit 1
fi
coordinator=$(found "$bin/cascade-coordinator")
if [[ -n $coordinator ]]; then
  echo "cascade-coordinator links engine, kernel or CUDA code:" >&2
  echo "$coordinator" | head -20 >&2
  exit 1
fi
if ldd "$bin/cascade-coordinator" | grep -E 'libcuda|libcudart|libcublas|libnccl'; then
  echo "cascade-coordinator loads a CUDA library" >&2
  exit 1
fi
echo "cascade-coordinator: no engine, kernel or CUDA symbols (cascade-worker has $worker)"
