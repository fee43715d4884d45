#!/usr/bin/env bash
# What each part of Cascade links, checked on the binaries and the sources:
# 1. The coordinator runs no stage: it computes only a draft model (--speculative draft,
#    engine/draft_model.h), on the CPU, so its binary may carry the engine and the CPU
#    kernels but never CUDA: no CUDA, NCCL or cuBLAS symbol in cascade-coordinator, no CUDA
#    library among what it loads. cascade-worker, which carries the engine (and, in a CUDA
#    build, CUDA), is the control that shows the check can see them.
# 2. `cascade generate`'s path (LocalEngine: the serving core over in-process stages, built
#    alone as local_engine_probe) carries no HTTP server, YAML or gRPC reflection code:
#    neither their libraries nor their symbols. cascade-coordinator, which carries all
#    three, is the control. The probe must also run and generate.
# 3. The serving core (serving/) includes nothing from coordinator/, and its code (its test
#    binary, which links the library alone) carries no gRPC server or client, HTTP server,
#    YAML or command-line library.
#   tests/link_check.sh BIN_DIR SOURCE_DIR MODEL
set -euo pipefail
bin=$1
src=$2
model=$3
# Symbols that only the engine, the kernels and the CUDA runtime define.
pattern='cascade::(Stage|KvCache|CpuBackend|CudaBackend|ThreadPool|StageExecutor)::|cascade::MakeBackend|cascade::.*KernelTable|cascade::ListGpus|\bcuda[A-Z][A-Za-z]*\b|\bnccl[A-Z]|\bcublas[A-Z]'
found() { nm -C --defined-only "$1" 2>/dev/null | grep -E "$pattern" || true; }

worker=$(found "$bin/cascade-worker" | wc -l)
if [[ $worker -eq 0 ]]; then
  echo "link check is blind: cascade-worker shows no engine or kernel symbols" >&2
  exit 1
fi
# Symbols that only the CUDA backend and the CUDA, NCCL and cuBLAS libraries define.
cuda='cascade::CudaBackend::|cascade::ListGpus|\bcuda[A-Z][A-Za-z]*\b|\bnccl[A-Z]|\bcublas[A-Z]'
coordinator=$(nm -C --defined-only "$bin/cascade-coordinator" 2>/dev/null | grep -E "$cuda" || true)
if [[ -n $coordinator ]]; then
  echo "cascade-coordinator links CUDA code:" >&2
  echo "$coordinator" | head -20 >&2
  exit 1
fi
if ldd "$bin/cascade-coordinator" | grep -E 'libcuda|libcudart|libcublas|libnccl'; then
  echo "cascade-coordinator loads a CUDA library" >&2
  exit 1
fi
echo "cascade-coordinator: no CUDA symbols (cascade-worker has $worker engine or kernel symbols)"

# 2. The LocalEngine path.
servers='libmicrohttpd|libyaml-cpp|libgrpc\+\+_reflection'
server_symbols='\bMHD_[a-z_]+|\bYAML::|grpc::reflection|ProtoServerReflection|cascade::HttpServer'
libs() { readelf -d "$1" | grep NEEDED | grep -E "$servers" || true; }
syms() { nm -C "$1" 2>/dev/null | grep -E "$server_symbols" || true; }
probe=$bin/local_engine_probe
if [[ -z $(libs "$bin/cascade-coordinator") || -z $(syms "$bin/cascade-coordinator") ]]; then
  echo "link check is blind: cascade-coordinator shows no HTTP server, YAML or reflection" >&2
  exit 1
fi
if [[ -n $(libs "$probe") || -n $(syms "$probe") ]]; then
  echo "the LocalEngine path (local_engine_probe) links server, YAML or reflection code:" >&2
  libs "$probe" >&2
  syms "$probe" | head -20 >&2
  exit 1
fi
ids=$("$probe" "$model" 8)
if [[ $(wc -w <<<"$ids") -ne 8 ]]; then
  echo "local_engine_probe did not generate 8 tokens: '$ids'" >&2
  exit 1
fi
echo "local_engine_probe: no HTTP server, YAML or reflection; generated: $ids"

# 3. The serving core: its includes, and what its code carries.
if grep -rn '#include "coordinator/' "$src/serving"; then
  echo "serving/ includes coordinator/ headers (above)" >&2
  exit 1
fi
echo "serving/: includes nothing from coordinator/"
core='grpc::Server|grpc::Channel|grpc_server_|grpc_channel_|\bMHD_[a-z_]+|\bYAML::|\bCLI::App'
core_syms() { nm -C "$1" 2>/dev/null | grep -E "$core" || true; }
if [[ -z $(core_syms "$bin/cascade-coordinator") ]]; then
  echo "link check is blind: cascade-coordinator shows no gRPC, HTTP, YAML or CLI symbols" >&2
  exit 1
fi
if [[ -n $(core_syms "$bin/cascade_serving_tests") ]]; then
  echo "the serving core (cascade_serving_tests) carries server, YAML or CLI code:" >&2
  core_syms "$bin/cascade_serving_tests" | head -20 >&2
  exit 1
fi
echo "serving core: no gRPC, HTTP server, YAML or CLI code"
