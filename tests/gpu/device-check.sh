#!/usr/bin/env bash
# The checks that need a GPU, in one run on a machine with one (about 6-8 minutes on a
# 16-core machine with an H100/H200): build with CUDA (and NCCL), then
#   1. the GPU tests (ctest -L gpu): CUDA kernels against the CPU, whole-model logits
#      against the CPU backend, a one-rank NCCL collective and a one-rank tensor-parallel
#      stage on NCCL, a 2-stage pipeline with both stages on the one GPU;
#   2. the GPU decode benchmark (bench/gpu_bench.cc): batch 1 and 32, TinyLlama-1.1B and
#      Llama-3-8B (8 of its 32 layers) shapes at F16, and the fraction of the measured
#      copy bandwidth the weights stream at;
# writing everything under $OUT (report.md first). Exit status: non-zero if the build or a
# test failed.
#
#   OUT=/tmp/out tests/gpu/device-check.sh          (from the repository root)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/cascade-device-check}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
report=$OUT/report.md
start=$SECONDS
{
  echo "# Cascade device check, $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "- CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
} > "$report"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true
echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n1)" >> "$report"

step() { echo "[$((SECONDS - start)) s] $*"; }
status=0

step "configure and build (CUDA ON)"
if ! { cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCASCADE_CUDA=ON \
         -DCASCADE_SHARED_DIR="${CASCADE_SHARED_DIR:-$PWD/../shared}" &&
       ninja -C "$BUILD" -j"$(nproc)" cascade_cuda_tests cascade_gpu_tests cascade_nccl_tests \
         gpu_bench; } > "$OUT/build.log" 2>&1; then
  echo "- build: FAILED (see build.log)" >> "$report"
  tail -n 40 "$OUT/build.log"
  exit 1
fi
echo "- build: ok ($((SECONDS - start)) s)" >> "$report"

step "GPU tests"
if (cd "$BUILD" && ctest -L gpu --output-on-failure --timeout 300) > "$OUT/ctest-gpu.log" 2>&1; then
  echo "- GPU tests: passed" >> "$report"
else
  echo "- GPU tests: FAILED" >> "$report"
  status=1
fi
grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Passed" "$OUT/ctest-gpu.log" | sed 's/^/    /' >> "$report"
# The recorded logit differences.
for t in cascade_gpu_tests cascade_nccl_tests cascade_cuda_tests; do
  "$BUILD/bin/$t" --gtest_output="xml:$OUT/$t.xml" > /dev/null 2>&1 || true
done
grep -ho 'name="[^"]*"[^>]*max_abs_logit_diff="[^"]*"' "$OUT"/*.xml 2>/dev/null |
  sed -E 's/name="([^"]*)".*max_abs_logit_diff="([^"]*)"/    \1: max |logit diff| \2/' >> "$report"

step "GPU decode benchmark"
if timeout 300 "$BUILD/bin/gpu_bench" --models "${CASCADE_GPU_BENCH_MODELS:-/tmp/cascade-gpu-bench}" \
     > "$OUT/gpu_bench.jsonl" 2> "$OUT/gpu_bench.err"; then
  echo "- GPU decode benchmark:" >> "$report"
  python3 - "$OUT/gpu_bench.jsonl" >> "$report" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for r in rows:
    if 'gpu' in r:
        print(f"    {r['gpu']}: device-to-device copy {r['copy_bandwidth_gb_s']:.0f} GB/s")
    else:
        print(f"    {r['shape']} ({r['layers']} layers) F16, batch {r['batch']}: {r['tokens_per_s']:.1f} tokens/s, "
              f"{r['ms_per_step']:.2f} ms/step, weights at {r['weight_stream_gb_s']:.0f} GB/s = "
              f"{100 * r['fraction_of_copy_bandwidth']:.0f}% of the copy bandwidth")
PY
else
  echo "- GPU decode benchmark: FAILED (see gpu_bench.err)" >> "$report"
  status=1
fi
echo "- total: $((SECONDS - start)) s" >> "$report"
cat "$report"
exit $status
