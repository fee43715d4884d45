#!/usr/bin/env bash
# Runs Cascade's benchmarks and prints each result as a ratio against its baseline.
#
#   bench/run_benchmarks.sh [pipeline|mpi|kernels|serving|longctx|prefix|replicas|spec|dataplane|moe|types|soak|all]  (default: all)
#   LLAMA_SERVER=/path/to/llama-server bench/run_benchmarks.sh prefix    # multi-turn chat, side by side
#   LLAMA_BENCH=/path/to/llama-bench bench/run_benchmarks.sh moe       # (f): Qwen3-30B-A3B layers, side by side
#   LLAMA_BENCH=/path/to/llama-bench bench/run_benchmarks.sh kernels     # side by side
#   LLAMA_SERVER=/path/to/llama-server bench/run_benchmarks.sh serving   # side by side
#   KV_TYPE=f32 bench/run_benchmarks.sh serving   # our KV cache in F32 (default f16, as the peer)
#   SOAK_LOGS=/tmp/soak bench/run_benchmarks.sh soak   # (j): keep the processes' logs there
#   LLAMA_SERVER=/path/to/llama-server bench/run_benchmarks.sh longctx   # decode at depth 1024
#   CASCADE_CPU_ISA=avx2 LLAMA_BENCH=/path/to/avx2-only/llama-bench bench/run_benchmarks.sh kernels
#       # an AVX2-only CPU (Zen 3) on an AVX-512 one: our AVX2 kernels against a llama.cpp
#       # built with GGML_NATIVE=OFF GGML_AVX512=OFF (its AVX2 kernels)
#
# With LLAMA_BENCH (a llama.cpp llama-bench built by hand, outside this repository),
# section (c) runs it on the very same model files as engine_bench, the two alternating
# for ROUNDS rounds (default 2), and prints both rates and their ratio for every type and
# thread count; without it, (c) prints our rates only.
#
# Models are random-weight files of named shapes written by `cascade make-model` into
# $CASCADE_BENCH_MODELS (default /tmp/cascade-bench-models); they are made once.
# Run on an otherwise idle machine: every benchmark shares its cores.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-build/bin}
MODELS=${CASCADE_BENCH_MODELS:-/tmp/cascade-bench-models}
WHAT=${1:-all}
mkdir -p "$MODELS"

model() {  # model SHAPE TYPE -> path (made if missing)
  local path="$MODELS/$1-$2.gguf"
  [[ -f $path ]] || "$BIN/cascade" make-model --shape "$1" --type "$2" "$path" >&2
  echo "$path"
}

json() {  # json KEY <<< '{...}'
  python3 -c "import json,sys; print(json.load(sys.stdin)['$1'])"
}

ratio() { python3 -c "print(f'{$1 / $2:.3f}')"; }

# Section (c): our engine and (with LLAMA_BENCH) llama.cpp's llama-bench on the same GGUF
# files: decode of 64 tokens and a 128-token prompt, 1 and 2 threads, ROUNDS rounds with
# the two taking turns (the peer first in every other round: a shared VM's speed drifts).
# Both decode from an empty context (engine_bench --decode-from-empty, as llama-bench -n).
side_by_side() {  # side_by_side FILE...
  local rounds=${ROUNDS:-2} out=$(mktemp -d)
  local files=("$@")
  ours() {  # ours FILE ROUND
    "$BIN/engine_bench" --model "$1" --threads 1,2 --decode-tokens 64 --prompt-tokens 128 \
      --prefill-tokens 0 --repeats 1 --triad-mib 0 --decode-from-empty --json > "$out/ours-$2-$(basename "$1")"
  }
  peer() {
    "$LLAMA_BENCH" -m "$1" -p 128 -n 64 -t 1,2 -r 1 -o json 2>/dev/null > "$out/peer-$2-$(basename "$1")"
  }
  if [[ -z ${LLAMA_BENCH:-} ]]; then
    echo "(the peer was not given: set LLAMA_BENCH=/path/to/llama-bench for the side-by-side figures)"
  elif [[ ! -x $LLAMA_BENCH ]]; then
    echo "LLAMA_BENCH=$LLAMA_BENCH is not an executable" >&2
    return 1
  fi
  for ((r = 1; r <= rounds; r++)); do
    for f in "${files[@]}"; do
      if [[ -n ${LLAMA_BENCH:-} && $((r % 2)) == 0 ]]; then peer "$f" "$r"; ours "$f" "$r"
      elif [[ -n ${LLAMA_BENCH:-} ]]; then ours "$f" "$r"; peer "$f" "$r"
      else ours "$f" "$r"; fi
    done
  done
  python3 - "$out" "$rounds" "${files[@]}" <<'PY'
import json, os, statistics, sys
out, rounds, files = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def load(kind, r, f):
    p = os.path.join(out, f"{kind}-{r}-{os.path.basename(f)}")
    if not os.path.exists(p) or os.path.getsize(p) == 0:
        return None
    with open(p) as fh:
        return [json.loads(l) for l in fh if l.strip()] if kind == "ours" else json.load(fh)
cols = [("decode", 1), ("decode", 2), ("prefill", 1), ("prefill", 2)]
def rates(kind, f):
    got = {c: [] for c in cols}
    for r in range(1, rounds + 1):
        d = load(kind, r, f)
        for row in d or []:
            if kind == "ours":
                got[("decode", row["threads"])].append(row["decode"])
                got[("prefill", row["threads"])].append(row["prompt"])
            else:
                what = "decode" if row["n_gen"] > 0 else "prefill"
                got[(what, row["n_threads"])].append(row["avg_ts"])
    return got
def span(v):
    return "-" if not v else (f"{min(v):.1f}" if len(v) == 1 else f"{min(v):.1f}-{max(v):.1f}")
peer_given = any(load("peer", r, f) for r in range(1, rounds + 1) for f in files)
print(f"tokens/s over {rounds} round(s): Cascade" + (" / llama.cpp (ratio of the means)" if peer_given else ""))
print("| model | decode 1 thr | decode 2 thr | prefill-128 1 thr | prefill-128 2 thr |")
print("|---" * (len(cols) + 1) + "|")
for f in files:
    name = os.path.basename(f).removesuffix(".gguf")
    o, p = rates("ours", f), rates("peer", f)
    cells = []
    for c in cols:
        if peer_given and p[c] and o[c]:
            ratio = statistics.mean(o[c]) / statistics.mean(p[c])
            cells.append(f"{span(o[c])} / {span(p[c])} ({ratio:.2f}x)")
        else:
            cells.append(span(o[c]))
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
  rm -rf "$out"
}

echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; $(date -u +%Y-%m-%d)"

if [[ $WHAT == pipeline || $WHAT == all ]]; then
  echo
  echo "== (a) cost of a hop: batch-1 decode, llama-110m F16, one thread per stage =="
  M=$(model llama-110m F16)
  # One process and the 2- and 3-stage pipelines are all started once and take turns,
  # twenty rounds of 64 tokens, the order rotated each round: a shared VM's speed drifts by
  # 10-20% within minutes (even between two runs of the same command), and many short
  # turns expose every set-up to the same drift (8 rounds of 128 left a spread of +-5%).
  # Two placements: every process on one vCPU (at batch 1 only one stage computes at a
  # time, so the ratio shows what the software's hops and threads cost), and free to use
  # both vCPUs, where each hop also wakes a halted vCPU (see docs/benchmarks.md).
  for placement in one spread; do
    if [[ $placement == one ]]; then pin=(taskset -c 0); label="all processes on vCPU 0"; else pin=(); label="free over $(nproc) vCPUs"; fi
    out=$("${pin[@]}" "$BIN/cluster_bench" compare --model "$M" --stages 2,3 --threads 1 --streams 1 --tokens 64 --repeats 20 2>/dev/null)
    python3 - "$out" "$label" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"[{sys.argv[2]}]")
print(f"  one process, 1 thread:        {r['baseline_tokens_per_s']:.2f} tokens/s (rounds: {r['baseline_rounds']})")
for p in r['pipelines']:
    print(f"  {p['stages']} stages, TCP data plane: {p['tokens_per_s']:.2f} tokens/s   ratio {p['ratio']:.3f} "
          f"(median of the rounds' ratios {p['median_round_ratio']:.3f})   (target >= 0.95)")
PY
    [[ $placement == one ]] && base=$(json baseline_tokens_per_s <<< "$out")
  done

  # The hop in absolute terms: on stories260K (compute ~0.1 ms/token) the per-token time
  # is almost all transport, so its growth per stage is the cost of one more hop; both
  # data planes, the TCP one (default) and gRPC streams.
  for dp in tcp grpc; do
    out=$("$BIN/cluster_bench" compare --model models/stories260K.gguf --stages 1,2,3 --threads 1 --streams 1 --tokens 200 --repeats 3 --data-plane "$dp" 2>/dev/null)
    python3 - "$out" "$base" "$dp" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
l = 1000 / r['baseline_tokens_per_s']
c1, c2, c3 = (1000 / p['tokens_per_s'] for p in r['pipelines'])
print(f'[data plane {sys.argv[3]}] stories260K ms/token: 1 process {l:.3f}; cluster with 1 / 2 / 3 stages {c1:.3f} / {c2:.3f} / {c3:.3f}')
print(f'cost of the coordinator round trip {c1 - l:.3f} ms, of each further stage {(c3 - c1) / 2:.3f} ms per token')
t = 1000 / float(sys.argv[2])
print(f'implied ratio at llama-110m ({t:.1f} ms/token): 2 stages {t / (t + c2 - l):.3f}, 3 stages {t / (t + c3 - l):.3f}')
PY
  done

  echo
  echo "== (b) pipeline kept full: 8 streams, tinyllama-1.1b (the target: F16) =="
  # Each stage decodes micro-batches of 4 streams and so reads its weights twice per step,
  # where one process reads them once: the quantized types show the same pipeline where
  # weight bytes weigh less.
  # Both set-ups stay up and take turns, 6 rounds of 8 x 32 tokens, the order rotated each
  # round (as in (a)): measured one after the other, the one process's rate moved by
  # 10-20% between runs, which was most of the spread of the ratios.
  for type in F16 Q8_0 Q4_K; do
    M=$(model tinyllama-1.1b "$type")
    out=$("$BIN/cluster_bench" compare --model "$M" --stages 2 --threads 1 --baseline-threads 2 --streams 8 --tokens 32 --repeats 6 2> >(grep "^stage" >&2))
    python3 - "$out" "$type" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); p = r['pipelines'][0]
target = "(target >= 0.9)" if sys.argv[2] == "F16" else ""
print(f"{sys.argv[2]}: one process, 2 threads {r['baseline_tokens_per_s']:.2f} tokens/s; 2 stages, 1 thread each "
      f"(TCP data plane) {p['tokens_per_s']:.2f} tokens/s; ratio {p['ratio']:.3f} (median of the rounds' "
      f"ratios {p['median_round_ratio']:.3f}) {target}")
PY
  done
fi

if [[ ($WHAT == mpi || $WHAT == all) && -x $BIN/cascade-mpi ]]; then
  echo
  echo "== (e) one MPI job (cascade-mpi): the MPI, TCP and gRPC data planes; tensor parallelism =="
  # Every cluster below is one mpirun job whose ranks are each their own pretend node, so the
  # data planes differ in nothing else; all set-ups are up at once and take turns (as in (a)).
  # The hop on stories260K (compute ~0.1 ms/token): per-token time of 1 and 3 stages.
  out=$("$BIN/cluster_bench" compare --launcher mpi --model models/stories260K.gguf --stages 1,3 \
        --data-plane mpi,tcp,grpc --threads 1 --streams 1 --tokens 200 --repeats 3 2>/dev/null)
  python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
l = 1000 / r['baseline_tokens_per_s']
ms = {(p['data_plane'], p['stages']): 1000 / p['tokens_per_s'] for p in r['pipelines']}
print(f"stories260K ms/token: one process {l:.3f}")
for dp in ('mpi', 'tcp', 'grpc'):
    c1, c3 = ms[(dp, 1)], ms[(dp, 3)]
    print(f"  [{dp:4}] 1 / 3 stages {c1:.3f} / {c3:.3f} ms; coordinator round trip {c1 - l:.3f} ms, "
          f"each further hop {(c3 - c1) / 2:.3f} ms per token")
PY
  # Batch-1 decode through 2 stages against one process (llama-110m F16, one thread each).
  M=$(model llama-110m F16)
  out=$("$BIN/cluster_bench" compare --launcher mpi --model "$M" --stages 2 --data-plane mpi,tcp \
        --threads 1 --streams 1 --tokens 64 --repeats 10 2>/dev/null)
  python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
print(f"llama-110m F16, batch 1: one process (1 thread) {r['baseline_tokens_per_s']:.2f} tokens/s")
by = {p['data_plane']: p for p in r['pipelines']}
for dp in ('mpi', 'tcp'):
    p = by[dp]
    print(f"  2 stages, {dp:3} data plane: {p['tokens_per_s']:.2f} tokens/s, ratio {p['ratio']:.3f} "
          f"(median of the rounds' ratios {p['median_round_ratio']:.3f})")
print(f"  MPI over TCP: {by['mpi']['tokens_per_s'] / by['tcp']['tokens_per_s']:.3f} (target >= 1.0)")
PY
  # Tensor parallelism: one stage of 2 ranks x 1 thread against 1 rank x 1 thread.
  out=$("$BIN/cluster_bench" compare --launcher mpi --model "$M" --stages 1 --tp 1,2 --data-plane mpi \
        --threads 1 --streams 1 --tokens 64 --repeats 10 2>/dev/null)
  python3 - "$out" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
by = {p['tp']: p for p in r['pipelines']}
print(f"llama-110m F16, batch 1, one stage: one process (1 thread) {r['baseline_tokens_per_s']:.2f}; "
      f"TP 1 {by[1]['tokens_per_s']:.2f}; TP 2 (2 ranks x 1 thread) {by[2]['tokens_per_s']:.2f} tokens/s; "
      f"TP 2 over TP 1: {by[2]['tokens_per_s'] / by[1]['tokens_per_s']:.3f}")
PY
fi

if [[ $WHAT == kernels || $WHAT == all ]]; then
  if [[ -x $BIN/engine_bench ]]; then
    echo
    echo "== (c) CPU engine: TinyLlama-1.1B (F16, Q8_0, Q4_0, Q4_K) and llama-110m F16, decode and prefill-128 =="
    files=()
    for t in F16 Q8_0 Q4_0 Q4_K; do files+=("$(model tinyllama-1.1b "$t")"); done
    side_by_side "${files[@]}" "$(model llama-110m F16)"
  fi
  if [[ -x $BIN/kernel_bench ]]; then
    echo
    echo "== (d) CPU matmul kernels, 1 thread, and the read rate on 1 and 2 (bytes_per_second: weight bytes; GFLOPS: 2*rows*cols*n) =="
    out=$("$BIN/kernel_bench" --benchmark_filter='threads:1|FmaPeak|ReadRate' --benchmark_min_time=0.1 2>/dev/null | grep BM_)
    awk '{printf "%-44s %9s %s  %s  %s\n", $1, $2, $3, $7, $8}' <<< "$out"
    # Prefill GEMMs as a fraction of the FMA peak measured in the same run, at the width
    # the kernels ran with (512-bit vectors with the AVX-512 table).
    bits=256
    if grep -q '^BM_FmaPeak/bits:512.*GFLOPS' <<< "$out" && [[ ${CASCADE_CPU_ISA:-} != avx2 ]]; then bits=512; fi
    echo "float prefill matmuls (128 tokens, 1 thread) as a fraction of the measured $bits-bit FMA peak:"
    awk -v peak_name="BM_FmaPeak/bits:$bits/real_time" '$1 == peak_name { for (i = 1; i <= NF; i++) if ($i ~ /^GFLOPS=/) { sub("GFLOPS=", "", $i); peak = $i + 0 } }
         /^BM_(MatMul|PrefillShape)\/(F32|F16|BF16)\/(n:128|rows)/ { for (i = 1; i <= NF; i++) if ($i ~ /^GFLOPS=/) { g = $i; sub("GFLOPS=", "", g); rate[$1] = g + 0 } }
         END { for (k in rate) printf "  %-62s %6.1f GFLOP/s  %5.1f%% of %.1f\n", k, rate[k], 100 * rate[k] / peak, peak }' <<< "$out" | sort
    # On an AVX-512 CPU the kernels above ran with the AVX-512 table: set them against the
    # AVX2 table on the same CPU (prefill sizes, where the two differ; attention at the
    # default KV block of 32).
    if grep -qw avx512f /proc/cpuinfo && [[ -z ${CASCADE_CPU_ISA:-} ]]; then
      echo "AVX-512 kernels against AVX2 on this CPU (1 thread; GFLOP/s, ratio):"
      filter='n:(16|128)/threads:1|BM_Attention/.*threads:1/.*block:32'
      fast=$("$BIN/kernel_bench" --benchmark_filter="$filter" --benchmark_min_time=0.1 2>/dev/null | grep BM_)
      base=$(CASCADE_CPU_ISA=avx2 "$BIN/kernel_bench" --benchmark_filter="$filter" \
               --benchmark_min_time=0.1 2>/dev/null | grep BM_)
      awk 'function g(line,   i, f) { f = ""; for (i = 1; i <= NF; i++) if ($i ~ /^GFLOPS=/) { f = $i; sub("GFLOPS=", "", f) } return f + 0 }
           NR == FNR { avx2[$1] = g($0); next }
           { a = g($0); if (avx2[$1] > 0) printf "  %-62s %7.1f vs %7.1f  %5.2fx\n", $1, a, avx2[$1], a / avx2[$1] }' \
        <(echo "$base") <(echo "$fast")
    fi
  fi
fi

# Servers for (e) and (f): a free port, and waiting until one answers /health.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_health() { for _ in $(seq 600); do curl -sf "http://127.0.0.1:$1/health" >/dev/null && return 0; sleep 0.2; done; return 1; }
# make_hosts TAG NET N: N network-namespace hosts TAG-1..TAG-N on a bridge brTAG, this
# namespace at NET.1 and host h at NET.1h (NET: the first three octets, e.g. 10.78.0).
make_hosts() {
  ip link add "br$1" type bridge && ip addr add "$2.1/24" dev "br$1" && ip link set "br$1" up
  for h in $(seq "$3"); do
    ip netns add "$1-$h"
    ip link add "v$1$h" type veth peer name eth0 netns "$1-$h"
    ip link set "v$1$h" master "br$1" up
    ip -n "$1-$h" addr add "$2.1$h/24" dev eth0
    ip -n "$1-$h" link set eth0 up
    ip -n "$1-$h" link set lo up
  done
}
remove_hosts() {  # remove_hosts TAG N: their processes, the hosts and the bridge
  for h in $(seq "$2"); do ip netns pids "$1-$h" 2>/dev/null | xargs -r kill 2>/dev/null || true; done
  sleep 0.5
  for h in $(seq "$2"); do ip netns del "$1-$h" 2>/dev/null || true; done
  ip link del "br$1" 2>/dev/null || true
}

if [[ $WHAT == serving || $WHAT == all ]]; then
  echo
  echo "== (e) serving: 16 streams against 1 through the HTTP API; TinyLlama-1.1B Q4_0, 2 threads =="
  # The same load on each server (bench/serving_bench.py): 128-token prompts (the same ids
  # for both), 128 tokens per stream, streamed /v1/completions. llama.cpp's server, when
  # LLAMA_SERVER names one, gets 16 parallel slots with continuous batching on the same
  # file and the same threads; the two take turns, two rounds, after a warm-up each.
  # KV_TYPE (default f16, the KV cache type llama.cpp's server keeps by default) sets ours.
  KV_TYPE=${KV_TYPE:-f16}
  echo "(our KV cache: $KV_TYPE; llama.cpp's: its default, f16)"
  M=$(model tinyllama-1.1b Q4_0)
  # Every run draws prompts from its own seed (the same for both servers): a prompt seen
  # before would let llama.cpp's server reuse its KV cache (cache_prompt) and skip prefill.
  run_load() { python3 bench/serving_bench.py --url "http://127.0.0.1:$1" --streams "$2" --prompt-tokens 128 --max-tokens 128 --vocab 32000 --seed "$3"; }
  start_ours() {
    port=$(free_port)
    "$BIN/cascade" serve --model "$M" --workers 1 --threads 2 --kv-type "$KV_TYPE" --listen "127.0.0.1:$(free_port)" \
      --control-listen "127.0.0.1:$(free_port)" --http-listen "127.0.0.1:$port" \
      --max-running 16 >/dev/null 2>&1 &
    pid=$!
    wait_health "$port"
  }
  start_peer() {
    port=$(free_port)
    "$LLAMA_SERVER" -m "$M" -t 2 -tb 2 -np 16 -c $((16 * 272)) -cb --port "$port" >/dev/null 2>&1 &
    pid=$!
    wait_health "$port"
  }
  results=$(mktemp)
  servers=(ours)
  [[ -n ${LLAMA_SERVER:-} ]] && servers+=(peer) || echo "(llama.cpp's server not given: set LLAMA_SERVER=/path/to/llama-server to measure it side by side)"
  for round in 1 2; do
    for who in "${servers[@]}"; do
      "start_$who"
      run_load "$port" 1 $((round * 100)) >/dev/null  # warm-up: the weights into the page cache
      for n in 1 16; do echo "$who $round $n $(run_load "$port" "$n" $((round * 100 + n)))" >> "$results"; done
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
  done
  python3 - "$results" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    who, rnd, n, js = line.split(" ", 3)
    rows.setdefault((who, int(n)), []).append(json.loads(js))
def rng(who, n, key, scale=1.0, fmt="{:.1f}"):
    v = [r[key] * scale for r in rows.get((who, n), [])]
    return "-" if not v else (fmt.format(min(v)) + "-" + fmt.format(max(v)))
print(f"{'':12} {'tokens/s':>14} {'TTFT p50 s':>12} {'TTFT p99 s':>12} {'ITL p50 ms':>12} {'ITL p99 ms':>12}")
for who in ("ours", "peer"):
    for n in (1, 16):
        if (who, n) not in rows: continue
        print(f"{who + ' x' + str(n):12} {rng(who, n, 'tokens_per_s'):>14} {rng(who, n, 'ttft_p50_s', fmt='{:.2f}'):>12} "
              f"{rng(who, n, 'ttft_p99_s', fmt='{:.2f}'):>12} {rng(who, n, 'itl_p50_s', 1000):>12} {rng(who, n, 'itl_p99_s', 1000):>12}")
best = lambda who, n, k: max(r[k] for r in rows[(who, n)])
print(f"ours: 16 streams / 1 stream: {best('ours', 16, 'tokens_per_s') / best('ours', 1, 'tokens_per_s'):.2f}x (target >= 4)")
if ("peer", 16) in rows:
    print(f"16 streams, ours / llama.cpp: {best('ours', 16, 'tokens_per_s') / best('peer', 16, 'tokens_per_s'):.2f}x (target >= 2)")
    print(f"1 stream,   ours / llama.cpp: {best('ours', 1, 'tokens_per_s') / best('peer', 1, 'tokens_per_s'):.2f}x (target >= 1.2)")
    ours99 = min(r['itl_p99_s'] for r in rows[('ours', 16)]); peer99 = min(r['itl_p99_s'] for r in rows[('peer', 16)])
    print(f"16 streams, inter-token p99: ours {ours99 * 1000:.0f} ms, llama.cpp {peer99 * 1000:.0f} ms (target: ours no worse)")
PY
  rm -f "$results"
fi

if [[ $WHAT == prefix || $WHAT == all ]]; then
  echo
  echo "== (g) prefix cache: 16 conversations x 4 turns sharing a ~1,000-token system prompt; TinyLlama-1.1B Q4_0, 2 threads =="
  # bench/chat_bench.py: each turn sends the whole history (system prompt, earlier messages
  # and answers) plus ~50 new tokens and takes 64 tokens back. Ours with the prefix cache
  # (the default) and with --prefix-cache off; llama.cpp's server with LLAMA_SERVER: 16
  # slots, its prompt cache on (its default), a context of 16 x 2048. Every server gets the
  # same text, after a warm-up request of other text.
  M=$(model tinyllama-1.1b Q4_0)
  results=$(mktemp)
  run_chat() { python3 bench/chat_bench.py --url "http://127.0.0.1:$1" --conversations 16 --turns 4 --seed 7; }
  start_server() {  # start_server on|off|peer
    port=$(free_port)
    if [[ $1 == peer ]]; then
      "$LLAMA_SERVER" -m "$M" -t 2 -tb 2 -np 16 -c $((16 * 2048)) -cb --port "$port" >/dev/null 2>&1 &
    else
      "$BIN/cascade" serve --model "$M" --workers 1 --threads 2 --listen "127.0.0.1:$(free_port)" \
        --control-listen "127.0.0.1:$(free_port)" --http-listen "127.0.0.1:$port" \
        --max-running 16 --prefix-cache "$1" >/dev/null 2>&1 &
    fi
    pid=$!
    wait_health "$port"
  }
  who_list=(on off)
  [[ -n ${LLAMA_SERVER:-} ]] && who_list+=(peer) || echo "(llama.cpp's server not given: set LLAMA_SERVER=/path/to/llama-server to measure it side by side)"
  for who in "${who_list[@]}"; do
    start_server "$who"
    python3 bench/chat_bench.py --url "http://127.0.0.1:$port" --conversations 1 --turns 1 --seed 99 >/dev/null
    echo "$who $(run_chat "$port")" >> "$results"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
  python3 - "$results" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows[who] = json.loads(js)
names = {"on": "ours, cache on", "off": "ours, cache off", "peer": "llama.cpp"}
print(f"{'':16} {'wall s':>8} {'gen tok/s':>10} {'TTFT p50 s':>11} {'turn 1 p50':>11} {'turns 2-4 p50':>14} {'cached':>7}")
for who, r in rows.items():
    cached = "-" if r["cached_ratio"] is None else f"{100 * r['cached_ratio']:.0f}%"
    print(f"{names[who]:16} {r['wall_s']:8.1f} {r['tokens_per_s']:10.2f} {r['ttft_p50_s']:11.2f} "
          f"{r['ttft_first_turn_p50_s']:11.2f} {r['ttft_later_turns_p50_s']:14.2f} {cached:>7}")
def cmp(base, target_ttft, target_tps):
    if base not in rows: return
    on, b = rows["on"], rows[base]
    print(f"cache on against {names[base]}: TTFT p50 {b['ttft_p50_s'] / on['ttft_p50_s']:.2f}x lower "
          f"(target >= {target_ttft}), throughput {on['tokens_per_s'] / b['tokens_per_s']:.2f}x (target >= {target_tps})")
cmp("off", 5, 2)
cmp("peer", 3, 1.5)
PY
  rm -f "$results"
fi

if [[ $WHAT == replicas || $WHAT == all ]]; then
  echo
  echo "== (h) replicas: the chat load of (g) on 2 replicas (two network-namespace hosts, one thread each) against 1 =="
  # A coordinator in this namespace and one cascade-worker (1 thread) in each of two hosts
  # made here (ip netns, a bridge; removed at the end). 1 replica: one worker serves
  # (--replicas 1). 2 replicas: both, each a whole pipeline (--replicas 2), routed
  # cache-aware and then round-robin. The same chat text for every run (chat_bench.py).
  if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null; then
    echo "(needs root and ip(8) for network namespaces: skipped)"
  else
    M=$(model tinyllama-1.1b Q4_0)
    results=$(mktemp)
    tag=cb$$
    make_hosts "$tag" 10.78.0 2
    trap 'remove_hosts "$tag" 2' EXIT
    run_replicas() {  # run_replicas NAME REPLICAS ROUTING
      local port control
      port=$(free_port); control=$(free_port)
      "$BIN/cascade-coordinator" --model "$M" --workers "$2" --replicas "$2" --routing "$3" \
        --listen "127.0.0.1:$(free_port)" --control-listen "10.78.0.1:$control" \
        --http-listen "127.0.0.1:$port" --max-running 16 >/dev/null 2>&1 &
      local coord=$!
      local pids=()
      for h in $(seq "$2"); do
        ip netns exec "$tag-$h" "$BIN/cascade-worker" --coordinator "10.78.0.1:$control" \
          --listen "10.78.0.1$h:0" --threads 1 --id "host$h" >/dev/null 2>&1 &
        pids+=($!)
      done
      wait_health "$port"
      python3 bench/chat_bench.py --url "http://127.0.0.1:$port" --conversations 1 --turns 1 --seed 99 >/dev/null
      echo "$1 $(python3 bench/chat_bench.py --url "http://127.0.0.1:$port" --conversations 16 --turns 4 --seed 7)" >> "$results"
      kill "$coord" "${pids[@]}" 2>/dev/null || true
      wait "$coord" "${pids[@]}" 2>/dev/null || true
    }
    run_replicas one 1 cache-aware
    run_replicas two 2 cache-aware
    run_replicas rr 2 round-robin
    remove_hosts "$tag" 2
    trap - EXIT
    python3 - "$results" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows[who] = json.loads(js)
names = {"one": "1 replica", "two": "2, cache-aware", "rr": "2, round-robin"}
print(f"{'':16} {'wall s':>8} {'gen tok/s':>10} {'TTFT p50 s':>11} {'turns 2-4 p50':>14} {'cached':>7}")
for who, r in rows.items():
    cached = "-" if r["cached_ratio"] is None else f"{100 * r['cached_ratio']:.1f}%"
    print(f"{names[who]:16} {r['wall_s']:8.1f} {r['tokens_per_s']:10.2f} {r['ttft_p50_s']:11.2f} "
          f"{r['ttft_later_turns_p50_s']:14.2f} {cached:>7}")
one, two, rr = rows["one"], rows["two"], rows["rr"]
print(f"2 replicas against 1: throughput {two['tokens_per_s'] / one['tokens_per_s']:.2f}x (target >= 1.8)")
print(f"cache-aware against round-robin: prefix hit rate {two['cached_ratio'] / rr['cached_ratio']:.2f}x "
      f"(target >= 1.5), TTFT p50 {rr['ttft_p50_s'] / two['ttft_p50_s']:.2f}x lower")
PY
    rm -f "$results"
  fi
fi

if [[ $WHAT == spec || $WHAT == all ]]; then
  echo
  echo "== (i) speculative decoding: one stream through 3 stages on 3 network-namespace hosts, 1 ms added per hop =="
  # A coordinator here and a cascade-worker (1 thread) in each of three hosts made here;
  # in front of each worker's data port a user-space proxy (bench/delay_proxy.py) adds
  # 1 ms each way (no netem in this kernel), and the worker advertises the proxy
  # (--data-advertise). Batch 1, 128 tokens, greedy: --speculative ngram against off, on
  # a prompt that asks the model to go on repeating text it was given and on plain story
  # text; then 16 streams at once (bench/serving_bench.py) to check a busy server loses
  # nothing.
  if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null; then
    echo "(needs root and ip(8) for network namespaces: skipped)"
  else
    results=$(mktemp)
    tag=cs$$
    make_hosts "$tag" 10.79.0 3
    trap 'remove_hosts "$tag" 3' EXIT
    REPEAT="Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day, she saw a big red ball in the park. Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. One day, she saw a big red ball in the park. Once upon a time, there was a little girl"
    PLAIN="Once upon a time"
    run_spec() {  # run_spec MODEL NAME off|ngram|draft [DRAFT_MODEL]
      local port control pids=() draft=()
      port=$(free_port); control=$(free_port)
      [[ $3 == draft ]] && draft=(--draft-model "$4")
      "$BIN/cascade-coordinator" --model "$1" --workers 3 --min-stages 3 --replicas 1 \
        --speculative "$3" "${draft[@]}" --listen "127.0.0.1:$(free_port)" --control-listen "10.79.0.1:$control" \
        --http-listen "127.0.0.1:$port" --max-running 16 >/dev/null 2>&1 &
      local coord=$!
      for h in 1 2 3; do
        ip netns exec "$tag-$h" python3 bench/delay_proxy.py --listen "10.79.0.1$h:7101" \
          --to "10.79.0.1$h:7100" --delay-ms 1 >/dev/null 2>&1 &
        pids+=($!)
        ip netns exec "$tag-$h" "$BIN/cascade-worker" --coordinator "10.79.0.1:$control" \
          --listen "10.79.0.1$h:0" --data-listen "10.79.0.1$h:7100" \
          --data-advertise "10.79.0.1$h:7101" --threads 1 --id "host$h" >/dev/null 2>&1 &
        pids+=($!)
      done
      wait_health "$port"
      echo "$2 $3 repeat $(python3 bench/spec_bench.py --url "http://127.0.0.1:$port" --prompt "$REPEAT")" >> "$results"
      echo "$2 $3 plain $(python3 bench/spec_bench.py --url "http://127.0.0.1:$port" --prompt "$PLAIN")" >> "$results"
      if [[ $2 == stories260K ]]; then
        # The acceptance sweep: seeded sampling at rising temperatures accepts fewer of
        # the greedy drafts (the same seed for off and on: the same text).
        for t in 0.6 1.0 1.4 2.0; do
          echo "$2 $3 t$t $(python3 bench/spec_bench.py --url "http://127.0.0.1:$port" --prompt "$PLAIN" \
            --temperature "$t" --seed 11)" >> "$results"
        done
        echo "$2 $3 busy $(python3 bench/serving_bench.py --url "http://127.0.0.1:$port" --streams 16 \
          --prompt-tokens 64 --max-tokens 128 --vocab 512 --seed 3)" >> "$results"
      fi
      kill "$coord" "${pids[@]}" 2>/dev/null || true
      wait "$coord" "${pids[@]}" 2>/dev/null || true
    }
    # The draft model of stories260K is stories260K itself (the only trained model with
    # its vocabulary here): its greedy drafts are what the pipeline samples at
    # temperature 0, so it shows the mechanism's ceiling, and the sweep its fall with a.
    run_spec models/stories260K.gguf stories260K off
    run_spec models/stories260K.gguf stories260K ngram
    run_spec models/stories260K.gguf stories260K draft models/stories260K.gguf
    m=$(model tinyllama-1.1b Q4_0)
    run_spec "$m" "$(basename "$m" .gguf)" off
    run_spec "$m" "$(basename "$m" .gguf)" ngram
    remove_hosts "$tag" 3
    trap - EXIT
    python3 - "$results" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    model, mode, load, js = line.split(" ", 3)
    rows[(model, mode, load)] = json.loads(js)
for model in dict.fromkeys(k[0] for k in rows):
    modes = [m for m in ("ngram", "draft") if (model, m, "repeat") in rows]
    for mode in modes:
        for load in ("repeat", "plain"):
            off, on = rows[(model, "off", load)], rows[(model, mode, load)]
            r = on["decode_tokens_per_s"] / off["decode_tokens_per_s"]
            target = ">= 2" if load == "repeat" else ">= 0.95"
            print(f"{model:24} {mode:5} {load:7} off {off['decode_tokens_per_s']:7.1f} tok/s, "
                  f"on {on['decode_tokens_per_s']:7.1f} tok/s: {r:.2f}x (target {target}); "
                  f"accepted {100 * on['acceptance']:.0f}%, {on['tokens_per_trip']:.2f} tokens/trip; "
                  f"same text: {off['text'] == on['text']}")
        if (model, "off", "busy") in rows:
            off, on = rows[(model, "off", "busy")], rows[(model, mode, "busy")]
            print(f"{model:24} {mode:5} 16 streams: off {off['tokens_per_s']:.1f} tok/s, on "
                  f"{on['tokens_per_s']:.1f} tok/s: {on['tokens_per_s'] / off['tokens_per_s']:.2f}x "
                  "(target >= 0.95)")
    sweep = sorted(k[2] for k in rows if k[0] == model and k[1] == "draft" and k[2].startswith("t"))
    if sweep:
        print(f"{model:24} draft: speed-up against the acceptance rate a (k = drafts per trip; "
              "model: (1 - a^(k+1)) / (1 - a) tokens per trip)")
        for load in ["plain"] + sweep:
            off, on = rows[(model, "off", load)], rows[(model, "draft", load)]
            a, k = on["acceptance"], on["drafts_per_trip"]
            # The issue's model with a = accepted / drafted and k = drafts per trip (k
            # adapts per step, so this is the mean).
            model_tpt = (1 - a ** (k + 1)) / (1 - a) if a < 1 else k + 1
            temp = "0" if load == "plain" else load[1:]
            print(f"  temperature {temp:4}: accepted {100 * a:3.0f}% of drafts, k {k:.2f}, "
                  f"{on['tokens_per_trip']:.2f} tokens/trip (model {model_tpt:.2f}), "
                  f"speed-up {on['decode_tokens_per_s'] / off['decode_tokens_per_s']:.2f}x; "
                  f"same text: {off['text'] == on['text']}")
PY
    rm -f "$results"
  fi
fi

if [[ $WHAT == longctx || $WHAT == all ]]; then
  echo
  echo "== (f) one stream at depth: a 1024-token prompt, then 128 tokens; TinyLlama-1.1B Q4_0, 2 threads =="
  # Decode over a long context, where attention reads the KV cache: ours with an F32 and
  # an F16 cache, llama.cpp's server (one slot, its F16 cache) with LLAMA_SERVER; two
  # rounds each, prompts from fresh seeds (no prompt cache hit), after a warm-up.
  M=$(model tinyllama-1.1b Q4_0)
  results=$(mktemp)
  who_list=(f32 f16)
  [[ -n ${LLAMA_SERVER:-} ]] && who_list+=(peer)
  for round in 1 2; do
    for who in "${who_list[@]}"; do
      port=$(free_port)
      if [[ $who == peer ]]; then
        "$LLAMA_SERVER" -m "$M" -t 2 -tb 2 -np 1 -c 2048 --port "$port" >/dev/null 2>&1 &
      else
        "$BIN/cascade" serve --model "$M" --workers 1 --threads 2 --kv-type "$who" \
          --listen "127.0.0.1:$(free_port)" --control-listen "127.0.0.1:$(free_port)" \
          --http-listen "127.0.0.1:$port" >/dev/null 2>&1 &
      fi
      pid=$!
      wait_health "$port"
      python3 bench/serving_bench.py --url "http://127.0.0.1:$port" --streams 1 --prompt-tokens 64 \
        --max-tokens 16 --vocab 32000 --seed 1 >/dev/null
      echo "$who $(python3 bench/serving_bench.py --url "http://127.0.0.1:$port" --streams 1 \
        --prompt-tokens 1024 --max-tokens 128 --vocab 32000 --seed $((round + 10)))" >> "$results"
      kill "$pid"; wait "$pid" 2>/dev/null || true
    done
  done
  python3 - "$results" <<'PY'
import json, sys
rows = {}
for line in open(sys.argv[1]):
    who, js = line.split(" ", 1)
    rows.setdefault(who, []).append(json.loads(js))
def rng(who, key, scale=1.0, fmt="{:.1f}"):
    v = [r[key] * scale for r in rows[who]]
    return fmt.format(min(v)) + "-" + fmt.format(max(v))
print(f"{'':14} {'TTFT s':>12} {'ITL p50 ms':>12} {'ITL p99 ms':>12} {'tokens/s':>12}")
for who, name in (("f32", "ours, F32 KV"), ("f16", "ours, F16 KV"), ("peer", "llama.cpp")):
    if who in rows:
        print(f"{name:14} {rng(who, 'ttft_p50_s', fmt='{:.2f}'):>12} {rng(who, 'itl_p50_s', 1000):>12} "
              f"{rng(who, 'itl_p99_s', 1000):>12} {rng(who, 'tokens_per_s'):>12}")
if "peer" in rows:
    for who in ("f32", "f16"):
        ratio = min(r['itl_p50_s'] for r in rows['peer']) / min(r['itl_p50_s'] for r in rows[who])
        print(f"decode at depth ({who} KV), ours / llama.cpp: {ratio:.2f}x (inter-token p50)")
PY
  rm -f "$results"
fi

# Issue 45: a mixture of experts (four layers of Qwen3-30B-A3B: 128 experts, 8 used, at
# Q4_K) and the weight types added then (TinyLlama-1.1B), side by side as in (c).
if [[ $WHAT == moe || $WHAT == all ]] && [[ -x $BIN/engine_bench ]]; then
  echo
  echo "== (f) mixture of experts: Qwen3-30B-A3B's layer shape, 4 layers, Q4_K, decode and prefill-128 =="
  side_by_side "$(model qwen3-30b-a3b-4l Q4_K)"
fi
if [[ $WHAT == types || $WHAT == all ]] && [[ -x $BIN/engine_bench ]]; then
  echo
  echo "== (g) the types of issue 45: TinyLlama-1.1B in ${TYPES:=Q4_1 Q5_0 Q5_1 Q3_K Q2_K IQ4_NL IQ4_XS} =="
  files=()
  for t in $TYPES; do files+=("$(model tinyllama-1.1b "$t")"); done
  side_by_side "${files[@]}"
fi

# Data-plane bytes per decode token per hop (issue 41): a steady step against the same step
# carrying every sequence's sampling (what an admitting step carries), batches 1 and 16.
if [[ $WHAT == dataplane || $WHAT == all ]]; then
  echo "== data plane: bytes per decode token per hop"
  "$BIN/data_plane_bench"
fi

if [[ $WHAT == soak || $WHAT == all ]]; then
  echo
  echo "== (j) soak: 10 minutes of 16 resuming clients while workers, the leader and etcd are killed, stopped and cut off =="
  # bench/soak.py: etcd, two coordinators (one leads, one stands by) and three workers (a
  # two-stage plan and a spare), each on a network-namespace host of its own made there;
  # 16 clients (client/python/cascade_client.py, which resumes broken streams) check every
  # text against a reference taken before the first fault, while faults come one at a time
  # (a worker and the leader SIGKILLed and started again, SIGSTOPped for 5 s, cut off with
  # nft for 5 s; etcd killed for 5 s). Target: 0 requests failed, hung or mismatched; no
  # process grows its memory or descriptors by more than 10% after the first minute (a
  # restarted one from its restart). Debian's python3 (python3-grpcio, python3-grpc-tools).
  if [[ $(id -u) != 0 ]] || ! command -v ip >/dev/null || ! command -v etcd >/dev/null; then
    echo "(needs root, ip(8), nft(8) and etcd for network-namespace hosts: skipped)"
  else
    logs=${SOAK_LOGS:-$(mktemp -d /tmp/cascade-soak.XXXXXX)}
    status=0
    /usr/bin/python3 bench/soak.py --bin "$BIN" --duration-s 600 --clients 16 \
      --keep-logs "$logs" --json "$logs/soak.json" | grep -v '^\[' || status=$?
    [[ $status == 0 ]] || echo "(soak: exit status $status; the logs are in $logs)"
  fi
fi
