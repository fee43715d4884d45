// Chat prompts: renders OpenAI-style messages into a model's prompt text, for the families
// of chat templates that GGUF files and tokenizer_config.json carry (Llama 3 headers,
// ChatML, Qwen3's ChatML with reasoning in <think>, Llama 2 / Mistral [INST], Zephyr,
// Gemma turns, Phi-3's <|end|> turns, Phi-4's <|im_sep|>). The template's Jinja source is
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

enum class ChatFormat {
  kUnknown,
  kLlama3,
  kChatMl,
  kQwen3,  // ChatML; earlier turns' <think> reasoning is dropped as Qwen3's template does
  kLlama2,
  kMistral,
  kZephyr,
  kGemma,  // Gemma, Gemma 2
  kPhi3,   // Phi-3, Phi-3.5, Phi-4-mini
  kPhi4,
};

ChatFormat DetectChatFormat(const std::string& jinja_template);
const char* ChatFormatName(ChatFormat f);
// The names of every format, for messages: "llama3, chatml, ...".
std::string KnownChatFormats();
// The format ChatFormatName gives that name; InvalidArgument otherwise (naming them all).
absl::StatusOr<ChatFormat> ChatFormatFromName(const std::string& name);

// The prompt for `messages`, ending where the assistant's reply starts. BOS is not
// included (the tokenizer adds it when the model asks for one).
absl::StatusOr<std::string> RenderChat(ChatFormat format, const std::vector<ChatMessage>& messages);

}  // namespace cascade

#endif  // CASCADE_SERVING_CHAT_TEMPLATE_H_
