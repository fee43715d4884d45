#include "serving/chat_template.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cascade {

ChatFormat DetectChatFormat(const std::string& t) {
  auto has = [&](const char* s) { return t.find(s) != std::string::npos; };
  if (has("<|start_header_id|>")) return ChatFormat::kLlama3;
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>")) return ChatFormat::kPhi4;
    return has("</think>") ? ChatFormat::kQwen3 : ChatFormat::kChatMl;
  }
  if (has("<start_of_turn>")) return ChatFormat::kGemma;
  if (has("<|user|>") && has("<|assistant|>")) {
    return has("<|end|>") ? ChatFormat::kPhi3 : ChatFormat::kZephyr;
  }
  if (has("[INST]")) return has("<<SYS>>") ? ChatFormat::kLlama2 : ChatFormat::kMistral;
  return ChatFormat::kUnknown;
}

namespace {

constexpr ChatFormat kKnownFormats[] = {
    ChatFormat::kLlama3, ChatFormat::kChatMl, ChatFormat::kQwen3, ChatFormat::kLlama2,
    ChatFormat::kMistral, ChatFormat::kZephyr, ChatFormat::kGemma, ChatFormat::kPhi3,
    ChatFormat::kPhi4};

}  // namespace

std::string KnownChatFormats() {
  std::string out;
  for (ChatFormat f : kKnownFormats) absl::StrAppend(&out, out.empty() ? "" : ", ", ChatFormatName(f));
  return out;
}

absl::StatusOr<ChatFormat> ChatFormatFromName(const std::string& name) {
  for (ChatFormat f : kKnownFormats) {
    if (name == ChatFormatName(f)) return f;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", name, "' is not a chat format (", KnownChatFormats(), ")"));
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
    case ChatFormat::kQwen3:
      return "qwen3";
    case ChatFormat::kPhi3:
      return "phi3";
    case ChatFormat::kPhi4:
      return "phi4";
    case ChatFormat::kUnknown:
      break;
  }
  return "unknown";
}

namespace {

using Messages = std::vector<ChatMessage>;

// What each published template does with a message's content: Llama 3 and Gemma apply
// Jinja's `trim`, Llama 2 Python's `strip()`; ChatML, Zephyr, Mistral, Phi-3 and Phi-4 keep
// it as is.
std::string Trim(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); }

// Python's str.strip/lstrip/rstrip with '\n' as the only character removed.
absl::string_view StripNewlines(absl::string_view s, bool left, bool right) {
  while (left && !s.empty() && s.front() == '\n') s.remove_prefix(1);
  while (right && !s.empty() && s.back() == '\n') s.remove_suffix(1);
  return s;
}

std::string RenderLlama3(const Messages& messages) {
  // meta-llama/Meta-Llama-3-8B-Instruct: '<|start_header_id|>' + role +
  // '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' per message (bos_token first).
  std::string out;
  for (const auto& m : messages) {
    absl::StrAppend(&out, "<|start_header_id|>", m.role, "<|end_header_id|>\n\n",
                    Trim(m.content), "<|eot_id|>");
  }
  return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
}

std::string RenderChatMl(const Messages& messages) {
  // teknium/OpenHermes-2.5-Mistral-7B (ChatML): '<|im_start|>' + role + '\n' + content +
  // '<|im_end|>\n'.
  std::string out;
  for (const auto& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "\n", m.content, "<|im_end|>\n");
  }
  return out + "<|im_start|>assistant\n";
}

std::string RenderQwen3(const Messages& messages) {
  // Qwen/Qwen3-8B: ChatML, where an assistant turn's reasoning ('<think>...</think>' in its
  // content) is kept only after the last user message (the turn being continued): earlier
  // turns keep what follows the last '</think>', its leading newlines removed. Without a
  // user message, no turn keeps its reasoning. The generation prompt is
  // '<|im_start|>assistant\n' (thinking on, the template's default).
  int last_query = static_cast<int>(messages.size()) - 1;
  for (int i = last_query; i >= 0; --i) {
    if (messages[i].role == "user") {
      last_query = i;
      break;
    }
  }
  std::string out;
  for (int i = 0; i < static_cast<int>(messages.size()); ++i) {
    const ChatMessage& m = messages[i];
    absl::string_view content = m.content;
    if (m.role != "assistant") {
      absl::StrAppend(&out, "<|im_start|>", m.role, "\n", content, "<|im_end|>\n");
      continue;
    }
    absl::string_view reasoning;
    if (const size_t end = content.find("</think>"); end != absl::string_view::npos) {
      absl::string_view before = StripNewlines(content.substr(0, end), false, true);
      if (const size_t open = before.rfind("<think>"); open != absl::string_view::npos) {
        before.remove_prefix(open + 7);
      }
      reasoning = StripNewlines(before, true, false);
      content = StripNewlines(content.substr(content.rfind("</think>") + 8), true, false);
    }
    const bool last = i + 1 == static_cast<int>(messages.size());
    if (i > last_query && (last || !reasoning.empty())) {
      absl::StrAppend(&out, "<|im_start|>assistant\n<think>\n",
                      StripNewlines(reasoning, true, true), "\n</think>\n\n",
                      StripNewlines(content, true, false), "<|im_end|>\n");
    } else {
      absl::StrAppend(&out, "<|im_start|>assistant\n", content, "<|im_end|>\n");
    }
  }
  return out + "<|im_start|>assistant\n";
}

std::string RenderPhi3(const Messages& messages) {
  // microsoft/Phi-3-mini-4k-instruct, Phi-3.5-mini-instruct: '<|' + role + '|>\n' +
  // content + '<|end|>\n' per message, then '<|assistant|>\n'. Phi-3.5 leaves out an empty
  // system message; so does this (Phi-3's template would print an empty one).
  std::string out;
  for (const auto& m : messages) {
    if (m.role == "system" && m.content.empty()) continue;
    absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, "<|end|>\n");
  }
  return out + "<|assistant|>\n";
}

std::string RenderPhi4(const Messages& messages) {
  // microsoft/phi-4: '<|im_start|>' + role + '<|im_sep|>' + content + '<|im_end|>' per
  // message, then '<|im_start|>assistant<|im_sep|>'.
  std::string out;
  for (const auto& m : messages) {
    absl::StrAppend(&out, "<|im_start|>", m.role, "<|im_sep|>", m.content, "<|im_end|>");
  }
  return out + "<|im_start|>assistant<|im_sep|>";
}

std::string RenderZephyr(const Messages& messages) {
  // HuggingFaceH4/zephyr-7b-beta: '<|role|>\n' + content + eos_token, each followed by the
  // template's newline.
  std::string out;
  for (const auto& m : messages) absl::StrAppend(&out, "<|", m.role, "|>\n", m.content, "</s>\n");
  return out + "<|assistant|>\n";
}

std::string RenderGemma(const Messages& messages) {
  // google/gemma-7b-it, gemma-2-9b-it: '<start_of_turn>' + (user|model) + '\n' + content |
  // trim + '<end_of_turn>\n'. That template refuses a system message; it is put in front of
  // the next user turn (as llama.cpp does).
  std::string out, system;
  for (const auto& m : messages) {
    if (m.role == "system") {
      system += Trim(m.content) + "\n\n";
      continue;
    }
    const char* who = m.role == "assistant" ? "model" : "user";
    absl::StrAppend(&out, "<start_of_turn>", who, "\n",
                    m.role == "user" ? std::exchange(system, "") : "", Trim(m.content),
                    "<end_of_turn>\n");
  }
  return out + "<start_of_turn>model\n";
}

std::string RenderLlama2(const Messages& messages) {
  // meta-llama/Llama-2-7b-chat-hf: user turns bos_token + '[INST] ' + content.strip() +
  // ' [/INST]', the system prompt in <<SYS>> in front of the first user content; assistant
  // turns ' ' + content.strip() + ' ' + eos_token. The first BOS is left to the tokenizer.
  std::string out, system;
  bool first = true;
  for (const auto& m : messages) {
    if (m.role == "system") {
      system = absl::StrCat("<<SYS>>\n", m.content, "\n<</SYS>>\n\n");
    } else if (m.role == "user") {
      if (!first) out += "<s>";
      absl::StrAppend(&out, "[INST] ", Trim(std::exchange(system, "") + m.content), " [/INST]");
      first = false;
    } else {
      absl::StrAppend(&out, " ", Trim(m.content), " </s>");
    }
  }
  return out;
}

std::string RenderMistral(const Messages& messages) {
  // mistralai/Mistral-7B-Instruct-v0.2 (its original template): bos_token once, then
  // '[INST] ' + content + ' [/INST]' for user turns and content + eos_token for assistant
  // turns; no BOS between turns. That template refuses a system message; as in Mistral's
  // later templates it goes in front of the first user message, followed by "\n\n".
  std::string out, system;
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

}  // namespace

absl::StatusOr<std::string> RenderChat(ChatFormat format, const Messages& messages) {
  if (messages.empty()) return absl::InvalidArgumentError("messages is empty");
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string& r = messages[i].role;
    if (r != "system" && r != "user" && r != "assistant") {
      return absl::InvalidArgumentError(
          absl::StrCat("messages[", i, "].role '", r, "' is not system, user or assistant"));
    }
  }
  switch (format) {
    case ChatFormat::kLlama3:
      return RenderLlama3(messages);
    case ChatFormat::kChatMl:
      return RenderChatMl(messages);
    case ChatFormat::kQwen3:
      return RenderQwen3(messages);
    case ChatFormat::kPhi3:
      return RenderPhi3(messages);
    case ChatFormat::kPhi4:
      return RenderPhi4(messages);
    case ChatFormat::kZephyr:
      return RenderZephyr(messages);
    case ChatFormat::kGemma:
      return RenderGemma(messages);
    case ChatFormat::kLlama2:
      return RenderLlama2(messages);
    case ChatFormat::kMistral:
      return RenderMistral(messages);
    case ChatFormat::kUnknown:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "this model has no chat template Cascade recognises (", KnownChatFormats(),
      "); use /v1/completions with a prompt"));
}

}  // namespace cascade
