# Tokenizer sources and tests, included by model/CMakeLists.txt (part of cascade_model).
set(CASCADE_TOKENIZER_SOURCES
  tokenizer.cc
  tokenizer/added_tokens.cc
  tokenizer/bpe_model.cc
  tokenizer/gguf_vocab.cc
  tokenizer/hf_vocab.cc
  tokenizer/named_pretokenizers.cc
  tokenizer/nfc.cc
  tokenizer/pipeline.cc
  tokenizer/pretokenizer.cc
  tokenizer/regex.cc
  tokenizer/spm_model.cc
  tokenizer/text_util.cc
)
set(CASCADE_TOKENIZER_TESTS
  tokenizer/tokenizer_test.cc
  tokenizer/tokenizer_errors_test.cc
  tokenizer/tokenizer_parts_test.cc
)
# Extra link dependencies of the tokenizer (model/CMakeLists.txt adds them to cascade_model).
set(CASCADE_TOKENIZER_LIBS absl::flat_hash_map absl::flat_hash_set)
