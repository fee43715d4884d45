// Chat prompts: renders OpenAI-style messages into a model's prompt text, for the families
// of chat templates that GGUF files and tokenizer_config.json carry (Llama 3 headers,
// ChatML, Llama 2 / Mistral [INST], Zephyr, Gemma turns). The template's Jinja source is
// recognised by its markers; Cascade does not run Jinja.
//
// Contract: pure functions. RenderChat fails with InvalidArgument for an empty message
// list, an unknown role, or a template of no known family (naming which).
#ifndef CASCADE_SERVING_CHAT_TEMPLATE_H_
#define CASCADE_SERVING_CHAT_TEMPLATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cascade {

struct ChatMessage {
  std::string role;  // system, user, assistant
  std::string content;
};

enum class ChatFormat { kUnknown, kLlama3, kChatMl, kLlama2, kMistral, kZephyr, kGemma };

ChatFormat DetectChatFormat(const std::string& jinja_template);
const char* ChatFormatName(ChatFormat f);
// The format ChatFormatName gives that name; InvalidArgument otherwise.
absl::StatusOr<ChatFormat> ChatFormatFromName(const std::string& name);

// The prompt for `messages`, ending where the assistant's reply starts. BOS is not
// included (the tokenizer adds it when the model asks for one).
absl::StatusOr<std::string> RenderChat(ChatFormat format, const std::vector<ChatMessage>& messages);

}  // namespace cascade

#endif  // CASCADE_SERVING_CHAT_TEMPLATE_H_
