#include "serving/chat_template.h"

#include <utility>

#include "absl/strings/ascii.h"
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

absl::StatusOr<ChatFormat> ChatFormatFromName(const std::string& name) {
  for (ChatFormat f : {ChatFormat::kLlama3, ChatFormat::kChatMl, ChatFormat::kLlama2,
                       ChatFormat::kMistral, ChatFormat::kZephyr, ChatFormat::kGemma}) {
    if (name == ChatFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a chat format"));
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
  // What each published template does with a message's content: Llama 3 and Gemma apply
  // Jinja's `trim`, Llama 2 Python's `strip()`; ChatML, Zephyr and Mistral keep it as is.
  auto trim = [](const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); };
  std::string out;
  switch (format) {
    case ChatFormat::kLlama3:
      // meta-llama/Meta-Llama-3-8B-Instruct: '<|start_header_id|>' + role +
      // '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' per message (bos_token first).
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                        trim(m.content), "<|eot_id|>");
      }
      out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      return out;
    case ChatFormat::kChatMl:
      // teknium/OpenHermes-2.5-Mistral-7B (ChatML): '<|im_start|>' + role + '\n' + content +
      // '<|im_end|>\n'.
      for (const auto& m : messages) {
        absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
      }
      out += "<|im_start|>assistant\n";
      return out;
    case ChatFormat::kZephyr:
      // HuggingFaceH4/zephyr-7b-beta: '<|role|>\n' + content + eos_token, each followed by
      // the template's newline.
      for (const auto& m : messages)
        absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, "</s>\n");
      out += "<|assistant|>\n";
      return out;
    case ChatFormat::kGemma: {
      // google/gemma-7b-it: '<start_of_turn>' + (user|model) + '\n' + content | trim +
      // '<end_of_turn>\n'. That template refuses a system message; it is put in front of the
      // next user turn (as llama.cpp does).
      std::string system;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system += trim(m.content) + "\n\n";
          continue;
        }
        const char* who = m.role == "assistant" ? "model" : "user";
        absl::StrAppend(&out, "<start_of_turn>", who, "\n",
                        m.role == "user" ? std::exchange(system, "") : "", trim(m.content),
                        "<end_of_turn>\n");
      }
      out += "<start_of_turn>model\n";
      return out;
    }
    case ChatFormat::kLlama2: {
      // meta-llama/Llama-2-7b-chat-hf: user turns bos_token + '[INST] ' + content.strip() +
      // ' [/INST]', the system prompt in <<SYS>> in front of the first user content;
      // assistant turns ' ' + content.strip() + ' ' + eos_token. The first BOS is left to
      // the tokenizer.
      std::string system;
      bool first = true;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = absl::StrCat("<<SYS>>\n", m.content, "\n<</SYS>>\n\n");
        } else if (m.role == "user") {
          if (!first) out += "<s>";
          absl::StrAppend(&out, "[INST] ", trim(std::exchange(system, "") + m.content), " [/INST]");
          first = false;
        } else {
          absl::StrAppend(&out, " ", trim(m.content), " </s>");
        }
      }
      return out;
    }
    case ChatFormat::kMistral: {
      // mistralai/Mistral-7B-Instruct-v0.2 (its original template): bos_token once, then
      // '[INST] ' + content + ' [/INST]' for user turns and content + eos_token for
      // assistant turns; no BOS between turns. That template refuses a system message; as
      // in Mistral's later templates it goes in front of the first user message, followed
      // by "\n\n".
      std::string system;
      for (const auto& m : messages) {
        if (m.role == "system") {
          system = m.content + "\n\n";
        } else if (m.role == "user") {
          absl::StrAppend(&out, "[INST] ", std::exchange(system, ""), m.content, " [/INST]");
        } else {
          absl::StrAppend(&out, m.content, "</s>");
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
