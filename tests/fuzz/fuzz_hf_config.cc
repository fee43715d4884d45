// libFuzzer target: Hugging Face config.json -> ModelConfig.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/arch.h"
#include "nlohmann/json.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return 0;
  for (const cascade::ArchSpec* spec : {&cascade::LlamaArch(), &cascade::Qwen2Arch()}) {
    cascade::ModelConfig config;
    if (spec->from_hf(j, "fuzz/config.json", &config).ok()) {
      if (config.Validate("fuzz").ok()) (void)config.RopeFrequencies();
    }
  }
  return 0;
}
