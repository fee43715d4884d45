#include "coordinator/chat_template.h"

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

TEST(ChatTemplate, RendersEachFamily) {
  EXPECT_EQ(*RenderChat(ChatFormat::kLlama3, kChat),
            "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(*RenderChat(ChatFormat::kChatMl, kChat),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(*RenderChat(ChatFormat::kLlama2, kChat),
            "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello.</s><s>[INST] Bye [/INST]");
  EXPECT_EQ(*RenderChat(ChatFormat::kMistral, kChat),
            "[INST] Be brief.\n\nHi [/INST] Hello.</s><s>[INST] Bye [/INST]");
  EXPECT_EQ(*RenderChat(ChatFormat::kGemma, kChat),
            "<start_of_turn>user\nBe brief.\n\nHi<end_of_turn>\n<start_of_turn>model\nHello."
            "<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
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
