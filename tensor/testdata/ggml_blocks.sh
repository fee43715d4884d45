#!/usr/bin/env bash
# Blocks encoded and decoded by ggml itself, for quant_test.cc's GgmlBlocks test: for each
# of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, 512 floats x[i] = sin(0.37 i + 0.1) * (1 + (i % 7) / 3)
# quantized by ggml_quantize_chunk and dequantized by ggml's to_float, written as
# TYPE.ggml (the blocks, then the 512 float32 values ggml decodes them to). Cascade's
# dequantization must give those values bit for bit.
#
#   tensor/testdata/ggml_blocks.sh LLAMA_DIR
#
# LLAMA_DIR: a llama.cpp tree already built with static libraries (the peer that
# ../shared/peers/llama-cpp.sh makes, $HOME/.cache/llama.cpp-peer: llama.cpp 80fb11a of
# 2026-09-12). Only the small program below is built, outside the repository.
set -euo pipefail
LLAMA=$1
OUT=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/blocks.cc" <<'CC'
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>
#include "ggml.h"
int main(int argc, char** argv) {
  const int n = 512;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) x[i] = std::sin(0.37f * i + 0.1f) * (1.0f + (i % 7) / 3.0f);
  const ggml_type types[] = {GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K,
                             GGML_TYPE_Q3_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
  for (ggml_type t : types) {
    std::vector<unsigned char> q(ggml_row_size(t, n));
    ggml_quantize_chunk(t, x.data(), q.data(), 0, 1, n, nullptr);
    ggml_get_type_traits(t)->to_float(q.data(), y.data(), n);
    const std::string path = std::string(argv[1]) + "/" + ggml_type_name(t) + ".ggml";
    FILE* f = std::fopen(path.c_str(), "wb");
    std::fwrite(q.data(), 1, q.size(), f);
    std::fwrite(y.data(), sizeof(float), n, f);
    std::fclose(f);
  }
  return 0;
}
CC
libs=$(find "$LLAMA/build/ggml" -name 'libggml-base.a')
g++ -O2 -std=c++17 -I"$LLAMA/src/ggml/include" "$WORK/blocks.cc" $libs -fopenmp -lpthread -lm \
  -o "$WORK/blocks"
"$WORK/blocks" "$OUT"
