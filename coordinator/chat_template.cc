#include "coordinator/chat_template.h"

#include "absl/strings/str_cat.h"

namespace cascade {

ChatFormat DetectChatFormat(const std::string& t) {
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|start_header_id|>")) return ChatFormat::kLlama3;
  if (has("<|im_start|>")) return ChatFormat::kChatMl;
  if (has("<start_of_turn>")) return ChatFormat::kGemma;
  if (has("<|user|>") && has("<|assistant|>")) return ChatFormat::kZephyr;
  if (has("[INST]")) return has("<<SYS>>") ? ChatFormat::kLlama2 : ChatFormat::kMistral;
  return ChatFormat::kUnknown;
}

const char* ChatFormatName(ChatFormat f) {
  switch (f) {
    case ChatFormat::kLlama3:
      return "llama3";
    case ChatFormat::kChatMl:
      return "chatml";
    case ChatFormat::kLlama2:
      return "llama2";
    case ChatFormat::kMistral:
      return "mistral";
    case ChatFormat::kZephyr:
      return "zephyr";
    case ChatFormat::kGemma:
      return "gemma";
    case ChatFormat::kUnknown:
      break;
  }
  return "unknown";
}

absl::StatusOr<std::string> RenderChat(ChatFormat format,
                                       const std::vector<ChatMessage>& messages) {
  if (messages.empty()) return absl::InvalidArgumentError("messages is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].role '", r, "' is not system, user or assistant"));
    }
  }
  std::string out;
  switch (format) {
    case ChatFormat::kLlama3:
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n", m.content,
                        "<|eot_id|>");
      }
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::kChatMl:
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      }
      out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::kZephyr:
      for (const auto& m : messages)
        absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, "</s>\n");
      out += "<|assistant|>\n";
      return out;
    case ChatFormat::kGemma: {
      std::string system;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system += m.content + "\n\n";
          continue;
        }
        const char* who = m.role == "assistant" ? "model" : "user";
        absl::StrAppend(&out, "<start_of_turn>", who, "\n",
                        m.role == "user" ? std::exchange(system, "") : "", m.content,
                        "<end_of_turn>\n");
      }
      out += "<start_of_turn>model\n";
      return out;
    }
    case ChatFormat::kLlama2:
    case ChatFormat::kMistral: {
      // [INST] user [/INST] assistant</s>[INST] ... ; the system prompt joins the first
      // user turn (inside <<SYS>> for Llama 2).
      std::string system;
      bool first = true;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = format == ChatFormat::kLlama2
                       ? absl::StrCat("<<SYS>>\n", m.content, "\n<</SYS>>\n\n")
                       : m.content + "\n\n";
        } else if (m.role == "user") {
          if (!first) out += "<s>";
          absl::StrAppend(&out, "[INST] ", std::exchange(system, ""), m.content, " [/INST]");
          first = false;
        } else {
          absl::StrAppend(&out, " ", m.content, "</s>");
        }
      }
      return out;
    }
    case ChatFormat::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(
      "this model has no chat template Cascade recognises (llama3, chatml, llama2, mistral, "
      "zephyr, gemma); use /v1/completions with a prompt");
}

}  // namespace cascade
