#include "serving/chat_template.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

const std::vector<ChatMessage> kChat = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello."}, {"user", "Bye"}};

TEST(ChatTemplate, DetectsFamiliesFromTheirMarkers) {
  EXPECT_EQ(DetectChatFormat("{{ '<|start_header_id|>' + message['role'] }}"), ChatFormat::kLlama3);
  EXPECT_EQ(DetectChatFormat("{{'<|im_start|>' + message['role'] + '\n'}}"), ChatFormat::kChatMl);
  EXPECT_EQ(DetectChatFormat("[INST] <<SYS>>"), ChatFormat::kLlama2);
  EXPECT_EQ(DetectChatFormat("{{ '[INST] ' + message['content'] + ' [/INST]' }}"),
            ChatFormat::kMistral);
  EXPECT_EQ(DetectChatFormat("<start_of_turn>user"), ChatFormat::kGemma);
  EXPECT_EQ(DetectChatFormat("<|user|>\n ... <|assistant|>"), ChatFormat::kZephyr);
  EXPECT_EQ(DetectChatFormat(""), ChatFormat::kUnknown);
}

// The published templates themselves (Jinja source as in each model's
// tokenizer_config.json) are recognised as their family.
TEST(ChatTemplate, DetectsThePublishedTemplates) {
  EXPECT_EQ(DetectChatFormat(
                "{% set loop_messages = messages %}{% for message in loop_messages %}{% set "
                "content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ "
                "message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set "
                "content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if "
                "add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' "
                "}}{% endif %}"),
            ChatFormat::kLlama3);
  EXPECT_EQ(DetectChatFormat("{% for message in messages %}{{'<|im_start|>' + message['role'] + "
                             "'\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
                             "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"),
            ChatFormat::kChatMl);
  EXPECT_EQ(
      DetectChatFormat(
          "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
          "system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages "
          "%}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if "
          "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
          "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content "
          "= message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + "
          "'[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' "
          "%}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"),
      ChatFormat::kLlama2);
  EXPECT_EQ(DetectChatFormat(
                "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') "
                "!= (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must "
                "alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
                "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% "
                "elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else "
                "%}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif "
                "%}{% endfor %}"),
            ChatFormat::kMistral);
  EXPECT_EQ(DetectChatFormat(
                "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ "
                "'<|user|>\n' + message['content'] + eos_token }}\n{% elif message['role'] == "
                "'system' %}\n{{ '<|system|>\n' + message['content'] + eos_token }}\n{% elif "
                "message['role'] == 'assistant' %}\n{{ '<|assistant|>\n'  + message['content'] + "
                "eos_token }}\n{% endif %}\n{% if loop.last and add_generation_prompt %}\n{{ "
                "'<|assistant|>' }}\n{% endif %}\n{% endfor %}"),
            ChatFormat::kZephyr);
  EXPECT_EQ(DetectChatFormat(
                "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
                "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == "
                "'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] "
                "%}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + "
                "'<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt "
                "%}{{'<start_of_turn>model\n'}}{% endif %}"),
            ChatFormat::kGemma);
}

// The expected strings below were written by hand from each model's published Jinja chat
// template (tokenizer_config.json on the Hugging Face Hub), rendered with
// add_generation_prompt=True. RenderChat leaves out the leading bos_token (the tokenizer adds
// it), so each expected string starts after it. The assistant turn carries surrounding
// spaces, to show which templates trim the content and which keep it.
const std::vector<ChatMessage> kWithSystem = {
    {"system", "Be brief."}, {"user", "Hi"}, {"assistant", "  Hello.  "}, {"user", "Bye"}};
const std::vector<ChatMessage> kNoSystem = {
    {"user", "Hi"}, {"assistant", "  Hello.  "}, {"user", "Bye"}};

TEST(ChatTemplate, Llama3FollowsMetaLlama3Instruct) {
  // meta-llama/Meta-Llama-3-8B-Instruct: for each message '<|start_header_id|>' + role +
  // '<|end_header_id|>\n\n' + content | trim + '<|eot_id|>' (bos_token before the first),
  // then '<|start_header_id|>assistant<|end_header_id|>\n\n'.
  EXPECT_EQ(*RenderChat(ChatFormat::kLlama3, kWithSystem),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

TEST(ChatTemplate, ChatMlFollowsOpenHermes) {
  // teknium/OpenHermes-2.5-Mistral-7B (ChatML): for each message '<|im_start|>' + role +
  // '\n' + content + '<|im_end|>' + '\n' (content untrimmed), then '<|im_start|>assistant\n'.
  EXPECT_EQ(*RenderChat(ChatFormat::kChatMl, kWithSystem),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n  Hello.  <|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Llama2FollowsLlama2Chat) {
  // meta-llama/Llama-2-7b-chat-hf: the system message becomes '<<SYS>>\n' + system +
  // '\n<</SYS>>\n\n' in front of the first user content; user turns are bos_token +
  // '[INST] ' + content.strip() + ' [/INST]', assistant turns ' ' + content.strip() + ' ' +
  // eos_token. So every user turn after the first starts with "<s>".
  EXPECT_EQ(*RenderChat(ChatFormat::kLlama2, kWithSystem),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello. </s>"
            "<s>[INST] Bye [/INST]");
  EXPECT_EQ(*RenderChat(ChatFormat::kLlama2, kNoSystem),
            "[INST] Hi [/INST] Hello. </s><s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, MistralFollowsMistral7BInstructV02) {
  // mistralai/Mistral-7B-Instruct-v0.2 (its original template): bos_token, then user turns
  // '[INST] ' + content + ' [/INST]' and assistant turns content + eos_token: no BOS between
  // turns, no space after [/INST], content untrimmed. No system role in that template.
  EXPECT_EQ(*RenderChat(ChatFormat::kMistral, kNoSystem),
            "[INST] Hi [/INST]  Hello.  </s>[INST] Bye [/INST]");
  // A system message (refused by that template) goes in front of the first user message,
  // followed by "\n\n", as in Mistral's later templates.
  EXPECT_EQ(*RenderChat(ChatFormat::kMistral, kWithSystem),
            "[INST] Be brief.\n\nHi [/INST]  Hello.  </s>[INST] Bye [/INST]");
}

TEST(ChatTemplate, ZephyrFollowsZephyr7BBeta) {
  // HuggingFaceH4/zephyr-7b-beta: for each message '<|' + role + '|>\n' + content +
  // eos_token and the template's line break, then '<|assistant|>' and a line break.
  EXPECT_EQ(*RenderChat(ChatFormat::kZephyr, kWithSystem),
            "<|system|>\nBe brief.</s>\n"
            "<|user|>\nHi</s>\n"
            "<|assistant|>\n  Hello.  </s>\n"
            "<|user|>\nBye</s>\n"
            "<|assistant|>\n");
}

TEST(ChatTemplate, GemmaFollowsGemma7BIt) {
  // google/gemma-7b-it: for each message '<start_of_turn>' + role ('model' for the
  // assistant) + '\n' + content | trim + '<end_of_turn>\n', then '<start_of_turn>model\n'.
  // The template has no system role.
  EXPECT_EQ(*RenderChat(ChatFormat::kGemma, kNoSystem),
            "<start_of_turn>user\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n"
            "<start_of_turn>model\n");
  // A system message (refused by the template) goes in front of the first user turn.
  EXPECT_EQ(*RenderChat(ChatFormat::kGemma, kWithSystem),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n"
            "<start_of_turn>model\nHello.<end_of_turn>\n"
            "<start_of_turn>user\nBye<end_of_turn>\n"
            "<start_of_turn>model\n");
}

TEST(ChatTemplate, DetectsQwen3Phi3AndPhi4) {
  // microsoft/Phi-3-mini-4k-instruct's template: Zephyr's role markers, but <|end|> closes
  // each turn.
  EXPECT_EQ(DetectChatFormat(
                "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\n' "
                "+ message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' "
                "%}{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == "
                "'assistant' %}{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif "
                "%}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ "
                "eos_token }}{% endif %}"),
            ChatFormat::kPhi3);
  // microsoft/phi-4: ChatML's markers with <|im_sep|> after the role.
  EXPECT_EQ(DetectChatFormat("{{'<|im_start|>user<|im_sep|>' + message['content'] + "
                             "'<|im_end|>'}}"),
            ChatFormat::kPhi4);
  // Qwen/Qwen3-8B: ChatML that splits an assistant turn at '</think>'.
  EXPECT_EQ(DetectChatFormat("{%- if '</think>' in content %}{%- set content = "
                             "content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}{{- "
                             "'<|im_start|>' + message.role + '\\n' + content }}"),
            ChatFormat::kQwen3);
  // Qwen2.5 (ChatML with tool calls, no reasoning) stays plain ChatML.
  EXPECT_EQ(DetectChatFormat("{{- '<|im_start|>' + message.role }}{{- '\\n<tool_call>\\n' }}"),
            ChatFormat::kChatMl);
  for (ChatFormat f : {ChatFormat::kQwen3, ChatFormat::kPhi3, ChatFormat::kPhi4}) {
    EXPECT_EQ(*ChatFormatFromName(ChatFormatName(f)), f);
  }
  EXPECT_THAT(std::string(ChatFormatFromName("jinja").status().message()),
              HasSubstr("qwen3, llama2"));
}

TEST(ChatTemplate, Qwen3DropsTheReasoningOfEarlierTurns) {
  // Qwen/Qwen3-8B: ChatML; an assistant turn before the last user message keeps only what
  // follows its last '</think>' (leading newlines removed).
  const std::vector<ChatMessage> chat = {{"system", "Be brief."},
                                         {"user", "Hi"},
                                         {"assistant", "<think>\nI should greet.\n</think>\n\nHello."},
                                         {"user", "Bye"}};
  EXPECT_EQ(*RenderChat(ChatFormat::kQwen3, chat),
            "<|im_start|>system\nBe brief.<|im_end|>\n"
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n"
            "<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Without a user message no turn keeps its reasoning (the template's last_query_index
  // stays at the last message).
  EXPECT_EQ(*RenderChat(ChatFormat::kQwen3, {{"system", "S"}, {"assistant", "<think>r</think>X"}}),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>assistant\nX<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Qwen3KeepsTheReasoningAfterTheLastUserMessage) {
  // After the last user message the last assistant turn is rendered with its reasoning,
  // newlines around it normalised; an earlier one there only when it has reasoning.
  EXPECT_EQ(*RenderChat(ChatFormat::kQwen3,
                        {{"user", "Hi"}, {"assistant", "<think>\n\nplan\n\n</think>\n\nPartial"}}),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\n<think>\nplan\n</think>\n\nPartial<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*RenderChat(ChatFormat::kQwen3, {{"user", "Hi"}, {"assistant", "A"}, {"assistant", "B"}}),
            "<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nA<|im_end|>\n"
            "<|im_start|>assistant\n<think>\n\n</think>\n\nB<|im_end|>\n"
            "<|im_start|>assistant\n");
}

TEST(ChatTemplate, Phi3FollowsPhi3MiniInstruct) {
  // microsoft/Phi-3-mini-4k-instruct: '<|' + role + '|>\n' + content + '<|end|>\n' per
  // message (content untrimmed), then '<|assistant|>\n'.
  EXPECT_EQ(*RenderChat(ChatFormat::kPhi3, kWithSystem),
            "<|system|>\nBe brief.<|end|>\n"
            "<|user|>\nHi<|end|>\n"
            "<|assistant|>\n  Hello.  <|end|>\n"
            "<|user|>\nBye<|end|>\n"
            "<|assistant|>\n");
  // Phi-3.5's template leaves out an empty system message.
  EXPECT_EQ(*RenderChat(ChatFormat::kPhi3, {{"system", ""}, {"user", "Hi"}}),
            "<|user|>\nHi<|end|>\n<|assistant|>\n");
}

TEST(ChatTemplate, Phi4FollowsPhi4) {
  // microsoft/phi-4: '<|im_start|>' + role + '<|im_sep|>' + content + '<|im_end|>' per
  // message, no newlines, then '<|im_start|>assistant<|im_sep|>'.
  EXPECT_EQ(*RenderChat(ChatFormat::kPhi4, kWithSystem),
            "<|im_start|>system<|im_sep|>Be brief.<|im_end|>"
            "<|im_start|>user<|im_sep|>Hi<|im_end|>"
            "<|im_start|>assistant<|im_sep|>  Hello.  <|im_end|>"
            "<|im_start|>user<|im_sep|>Bye<|im_end|>"
            "<|im_start|>assistant<|im_sep|>");
}

TEST(ChatTemplate, RefusesWhatItCannotRender) {
  EXPECT_THAT(std::string(RenderChat(ChatFormat::kChatMl, {}).status().message()),
              HasSubstr("empty"));
  EXPECT_THAT(std::string(RenderChat(ChatFormat::kChatMl, {{"robot", "x"}}).status().message()),
              HasSubstr("messages[0].role 'robot'"));
  EXPECT_THAT(std::string(RenderChat(ChatFormat::kUnknown, kChat).status().message()),
              HasSubstr("no chat template"));
}

}  // namespace
}  // namespace cascade
