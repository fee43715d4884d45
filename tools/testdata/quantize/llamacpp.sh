#!/usr/bin/env bash
# llama.cpp's logits for tools/quantize_types_test.cc (TYPE.llamacpp.npy): the same 64
# sampled vocabulary ids per prompt position as reference.py, from llama.cpp's own forward
# pass (8-bit activations, as it computes quantized matmuls; F32 KV cache) on the file
# `cascade quantize` writes.
#
#   tools/testdata/quantize/llamacpp.sh LLAMA_DIR MODEL.gguf OUT.npy [PROMPT.ids]
#
# LLAMA_DIR: a llama.cpp tree already built with static libraries, e.g. the peer that
# ../shared/peers/llama-cpp.sh makes ($HOME/.cache/llama.cpp-peer, llama.cpp 80fb11a of
# 2026-09-12; build its `llama` target). This script builds only the small program below
# against it, outside the repository.
set -euo pipefail
LLAMA=$1 MODEL=$2 OUT=$3
HERE=$(cd "$(dirname "$0")" && pwd)
PROMPT=${4:-$HERE/../../../../shared/models/tiny-llama-q/prompt.ids}  # ../shared beside the repo
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/dump.cc" <<'CC'
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>
#include "llama.h"
int main(int argc, char** argv) {
  std::ifstream in(argv[2]);
  std::vector<llama_token> ids;
  for (int v; in >> v;) ids.push_back(v);
  llama_backend_init();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (!model) return 1;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 64;
  cp.n_threads = cp.n_threads_batch = 2;
  cp.type_k = cp.type_v = GGML_TYPE_F32;
  llama_context* ctx = llama_init_from_model(model, cp);
  if (!ctx) return 1;
  const int n = static_cast<int>(ids.size());
  llama_batch b = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    b.token[i] = ids[i];
    b.pos[i] = i;
    b.n_seq_id[i] = 1;
    b.seq_id[i][0] = 0;
    b.logits[i] = 1;
  }
  b.n_tokens = n;
  if (llama_decode(ctx, b) != 0) return 1;
  const int vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  const int samples = (vocab + 499) / 500;
  std::vector<float> out;
  for (int i = 0; i < n; ++i) {
    const float* l = llama_get_logits_ith(ctx, i);
    for (int s = 0; s < samples; ++s) out.push_back(l[500 * s]);
  }
  // .npy version 1.0, '<f4', C order, shape (n, samples); magic, length and header: 128 bytes.
  char header[118];
  int len = std::snprintf(header, sizeof(header),
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", n,
                          samples);
  while (len < 117) header[len++] = ' ';
  header[117] = '\n';
  FILE* f = std::fopen(argv[3], "wb");
  const unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 118, 0};
  std::fwrite(magic, 1, 10, f);
  std::fwrite(header, 1, 118, f);
  std::fwrite(out.data(), sizeof(float), out.size(), f);
  std::fclose(f);
  llama_batch_free(b);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
CC
verbs=""  # ggml's RPC backend uses RDMA verbs where the system has them
if ldconfig -p | grep libibverbs.so >/dev/null; then verbs=-libverbs; fi
libs=$(find "$LLAMA/build" -name 'libllama.a' -o -name 'libggml*.a' | sort -r)
g++ -O2 -std=c++17 -I"$LLAMA/src/include" -I"$LLAMA/src/ggml/include" "$WORK/dump.cc" \
  -Wl,--start-group $libs -Wl,--end-group -fopenmp -lpthread -ldl $verbs -o "$WORK/dump"
"$WORK/dump" "$MODEL" "$PROMPT" "$OUT"
