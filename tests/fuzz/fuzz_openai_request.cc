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
  const int64_t prompts = r->prompts.empty() ? 1 : static_cast<int64_t>(r->prompts.size());
  if (r->n < 1 || r->n * prompts > cascade::kMaxChoices) std::abort();
  if (r->base.top_logprobs() < 0 || r->base.top_logprobs() > 20) std::abort();
  if (endpoint == cascade::OpenAiEndpoint::kChat && r->messages.empty()) std::abort();
  if (endpoint == cascade::OpenAiEndpoint::kCompletions && r->prompts.empty()) std::abort();
  return 0;
}
