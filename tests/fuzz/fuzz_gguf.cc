// libFuzzer target: GGUF parsing, then everything that reads the parsed metadata (model
// config of the architecture, tokenizer vocabulary). Must never crash or read out of
// bounds; errors are fine.
#include <cstddef>
#include <cstdint>
#include <span>

#include "model/arch.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = cascade::GgufFile::Parse(std::span<const uint8_t>(data, size), "fuzz.gguf");
  if (!file.ok()) return 0;
  // Every tensor's data must lie inside the buffer: touch its first and last byte.
  volatile uint8_t sink = 0;
  for (const auto& t : (*file)->tensors()) {
    if (t.nbytes > 0) sink = sink + t.data[0] + t.data[t.nbytes - 1];
  }
  if (auto arch = (*file)->GetString("general.architecture"); arch.ok()) {
    if (const cascade::ArchSpec* spec = cascade::FindArchByGgufName(*arch)) {
      cascade::ModelConfig config;
      if (spec->from_gguf(**file, &config).ok()) (void)config.Validate("fuzz.gguf");
    }
  }
  auto tok = cascade::Tokenizer::FromGguf(**file);
  if (tok.ok()) {
    auto ids = (*tok)->Encode("Hello world! 123 <s> \xe2\x96\x81x \xf0\x9f\x98\x80", true, true);
    if (ids.ok()) (void)(*tok)->Decode(*ids);
  }
  return 0;
}
