// libFuzzer target: a Hugging Face tokenizer.json (normalizers, pre-tokenizers, BPE model,
// added tokens), then encoding and decoding a fixed text with whatever loaded.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/tokenizer/loaders.h"
#include "model/tokenizer/pipeline.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto spec = cascade::tok::LoadHfVocab("fuzz/tokenizer.json", json, "", "");
  if (!spec.ok()) return 0;
  auto tok = cascade::tok::PipelineTokenizer::Create(std::move(*spec));
  if (!tok.ok()) return 0;
  auto ids =
      (*tok)->Encode("Hello world! 123 <s>  \n\t \xe2\x96\x81x \xf0\x9f\x98\x80", true, true);
  if (ids.ok()) (void)(*tok)->Decode(*ids, true);
  return 0;
}
