#!/usr/bin/env bash
# Runs every Cascade test on a fresh Debian 12 machine:
#   1. installs dependencies and builds (scripts/setup.sh),
#   2. ctest: unit, integration, multi-process and CLI tests (tests needing a GPU are
#      labelled "gpu" and skip themselves without one; tests needing ../shared skip
#      themselves, saying so, when it is absent),
#   3. a clang build of every library and binary with the thread-safety analysis as errors
#      (the locking the code states is checked) and ASan + UBSan; under it the model
#      readers', the data plane's and the coordinator's tests and the corrupted-file suite
#      run again; then each libFuzzer target for a bounded time: the model-file readers
#      and, from the network, data-plane frames and results, the TCP frame reader and the
#      OpenAI API's request bodies.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh

JOBS=${JOBS:-$(nproc)}
ctest --test-dir build --output-on-failure -j"$JOBS" --timeout 900

# Clang: thread-safety analysis (-Werror=thread-safety, see cmake/CascadeCompiler.cmake),
# sanitizers and fuzzers in one build.
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCASCADE_SANITIZE=address,undefined -DCASCADE_FUZZ=ON -DCASCADE_CUDA=OFF \
  -DCASCADE_BUILD_BENCH=OFF ${CMAKE_ARGS:-}
SANITIZED_TESTS=(cascade_model_tests cascade_corrupt_tests cascade_generation_tests cascade_serving_tests
                 cascade_transport_tests cascade_coordinator_tests cascade_worker_tests
                 cascade_kernels_tests cascade_engine_tests cascade_util_tests)
cmake --build build-fuzz -j"$JOBS" --target cascade cascade-coordinator cascade-worker cascade-mpi \
  "${SANITIZED_TESTS[@]}" fuzz_gguf fuzz_safetensors fuzz_hf_config fuzz_tokenizer_json \
  fuzz_frame fuzz_tcp_reader fuzz_openai_request
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for t in "${SANITIZED_TESTS[@]}"; do
  echo "$t (ASan + UBSan)"
  ./build-fuzz/bin/"$t" --gtest_brief=1
done

SECONDS_PER_FUZZER=${CASCADE_FUZZ_SECONDS:-60}
corpus=build-fuzz/corpus
FUZZERS=(gguf safetensors hf_config tokenizer_json frame tcp_reader openai_request)
rm -rf "$corpus" && mkdir -p "${FUZZERS[@]/#/$corpus/}"
# The network fuzzers start from valid messages (tests/fuzz/seeds/<target>/).
for f in "${FUZZERS[@]}"; do
  [[ -d tests/fuzz/seeds/$f ]] && cp tests/fuzz/seeds/$f/* "$corpus/$f/"
done
cp models/stories260K.gguf "$corpus/gguf/"
[[ -d ../shared/testdata/tokenizer ]] && cp ../shared/testdata/tokenizer/ggml-vocab-llama-spm.gguf "$corpus/gguf/"
[[ -f ../shared/models/stories260K/hf/model.safetensors ]] && \
  cp ../shared/models/stories260K/hf/model.safetensors "$corpus/safetensors/"
printf '{"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":172,"num_attention_heads":8,"num_key_value_heads":4,"num_hidden_layers":5,"vocab_size":512,"rope_scaling":{"rope_type":"llama3","factor":8}}' \
  > "$corpus/hf_config/llama.json"
[[ -f ../shared/models/stories260K/hf/tokenizer.json ]] && \
  cp ../shared/models/stories260K/hf/tokenizer.json "$corpus/tokenizer_json/stories.json"
printf '{"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]},"pre_tokenizer":{"type":"ByteLevel"},"added_tokens":[{"id":3,"content":"<s>","special":true}]}' \
  > "$corpus/tokenizer_json/tiny.json"
# Inputs that once crashed a fuzzer (tests/fuzz/regressions/<target>/) seed its corpus, so
# libFuzzer replays them first. On a failure the sanitizer's report and the reproducer's
# path are printed, not just the final statistics.
for f in "${FUZZERS[@]}"; do
  [[ -d tests/fuzz/regressions/$f ]] && cp tests/fuzz/regressions/$f/* "$corpus/$f/"
  echo "fuzz_$f: ${SECONDS_PER_FUZZER}s"
  log=build-fuzz/fuzz_$f.log
  if ! ./build-fuzz/bin/fuzz_$f -max_total_time="$SECONDS_PER_FUZZER" -max_len=1200000 \
      -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix=build-fuzz/ \
      "$corpus/$f" >"$log" 2>&1; then
    echo "fuzz_$f FAILED; its report (full log: $log):"
    grep -E -A40 'runtime error|ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)' "$log" | head -n 80
    grep -E 'Test unit written to' "$log" || true
    exit 1
  fi
  tail -n 3 "$log"
done
echo "all tests passed"
