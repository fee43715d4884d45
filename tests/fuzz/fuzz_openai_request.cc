// libFuzzer target: an HTTP request body for /v1/completions or /v1/chat/completions (the
// first byte picks which), parsed as the OpenAI-compatible API does. Errors must carry a
// message; an accepted request must be within the documented limits.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "serving/openai_request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto endpoint =
      data[0] & 1 ? cascade::OpenAiEndpoint::kChat : cascade::OpenAiEndpoint::kCompletions;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  auto r = cascade::ParseOpenAiRequest(body, endpoint);
  if (!r.ok()) {
    if (r.status().message().empty()) std::abort();
    return 0;
  }
  const cascade::GenerateSpec& g = r->spec;
  const int64_t prompts = g.prompts.empty() ? 1 : static_cast<int64_t>(g.prompts.size());
  if (g.n < 1 || g.n * prompts > cascade::kMaxChoices) std::abort();
  if (g.top_logprobs < 0 || g.top_logprobs > 20) std::abort();
  if (!g.sampling.Validate().ok()) std::abort();  // every accepted setting is in range
  if (endpoint == cascade::OpenAiEndpoint::kChat && r->messages.empty()) std::abort();
  if (endpoint == cascade::OpenAiEndpoint::kCompletions && g.prompts.empty()) std::abort();
  return 0;
}
