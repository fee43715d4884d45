#include "model/gguf.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf_writer.h"
#include "model/test_util.h"

namespace cascade {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> TinyFile() {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetUint32("llama.block_count", 2);
  w.SetFloat32("llama.rope.freq_base", 10000.0f);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "c"});
  w.SetFloat32Array("tokenizer.ggml.scores", {0.5f, -1.0f, 2.0f});
  static std::vector<uint8_t> data(4 * 8);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i);
  w.AddTensor("t0", TensorType::kF32, {4, 2}, data);
  w.AddTensor("t1", TensorType::kF16, {4}, std::span<const uint8_t>(data.data(), 8));
  auto bytes = w.Serialize();
  EXPECT_TRUE(bytes.ok());
  return *bytes;
}

TEST(Gguf, ParsesWhatTheWriterWrites) {
  auto bytes = TinyFile();
  auto f = GgufFile::Parse(bytes, "tiny.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ(*(*f)->GetString("general.architecture"), "llama");
  EXPECT_EQ(*(*f)->GetInt("llama.block_count"), 2);
  EXPECT_FLOAT_EQ(static_cast<float>(*(*f)->GetFloat("llama.rope.freq_base")), 10000.0f);
  EXPECT_TRUE(*(*f)->GetBool("tokenizer.ggml.add_bos_token"));
  auto tokens = (*f)->GetArray("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)->strings, (std::vector<std::string>{"a", "b", "c"}));
  auto scores = (*f)->GetArray("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.ok());
  EXPECT_FLOAT_EQ(static_cast<float>((*scores)->GetFloat(2)), 2.0f);
  ASSERT_EQ((*f)->tensors().size(), 2u);
  const GgufTensorInfo* t0 = (*f)->FindTensor("t0");
  ASSERT_NE(t0, nullptr);
  EXPECT_EQ(t0->ne[0], 4);
  EXPECT_EQ(t0->ne[1], 2);
  EXPECT_EQ(t0->nbytes, 32u);
  EXPECT_EQ(std::memcmp(t0->data, bytes.data() + (*f)->data_offset(), 32), 0);
  EXPECT_EQ(((*f)->FindTensor("t1")->data - bytes.data()) % 32, 0);
}

// Empty arrays are legal GGUF. Reading zero elements must not touch the (possibly null)
// buffer of an empty vector: the sanitizer build of this test catches a memcpy to null,
// which the GGUF fuzzer found.
TEST(Gguf, EmptyArraysParse) {
  GgufWriter w;
  w.SetString("general.architecture", "llama");
  w.SetFloat32Array("tokenizer.ggml.scores", {});
  w.SetInt32Array("tokenizer.ggml.token_type", {});
  w.SetStringArray("tokenizer.ggml.merges", {});
  auto bytes = w.Serialize();
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  auto f = GgufFile::Parse(*bytes, "empty-arrays.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  for (const char* key : {"tokenizer.ggml.scores", "tokenizer.ggml.token_type",
                          "tokenizer.ggml.merges"}) {
    auto a = (*f)->GetArray(key);
    ASSERT_TRUE(a.ok()) << key << ": " << a.status();
    EXPECT_EQ((*a)->size, 0u) << key;
    EXPECT_TRUE((*a)->raw.empty()) << key;
    EXPECT_TRUE((*a)->strings.empty()) << key;
  }
}

TEST(Gguf, TypedGettersNameTheProblem) {
  auto bytes = TinyFile();
  auto f = GgufFile::Parse(bytes, "tiny.gguf");
  ASSERT_TRUE(f.ok());
  auto missing = (*f)->GetInt("llama.nope");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("llama.nope"));
  auto wrong = (*f)->GetInt("general.architecture");
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(wrong.status().message(), HasSubstr("expected an integer"));
  EXPECT_EQ(*(*f)->GetIntOr("llama.nope", 7), 7);
}

TEST(Gguf, RejectsBadMagicAndVersion) {
  auto bytes = TinyFile();
  auto bad = bytes;
  bad[0] = 'X';
  auto f = GgufFile::Parse(bad, "x.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("not a GGUF file"));
  bad = bytes;
  bad[4] = 9;
  f = GgufFile::Parse(bad, "x.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.status().message(), HasSubstr("unsupported version 9"));
}

TEST(Gguf, EveryTruncationFailsCleanly) {
  auto bytes = TinyFile();
  auto full = GgufFile::Parse(bytes, "full.gguf");
  ASSERT_TRUE(full.ok());
  // Only the padding after the last tensor may be cut without losing anything.
  const GgufTensorInfo* last = (*full)->FindTensor("t1");
  const size_t data_end = (*full)->data_offset() + last->offset + last->nbytes;
  ASSERT_LT(data_end, bytes.size());
  for (size_t n = 0; n < data_end; ++n) {
    std::span<const uint8_t> cut(bytes.data(), n);
    auto f = GgufFile::Parse(cut, "cut.gguf");
    EXPECT_FALSE(f.ok()) << "truncated to " << n << " bytes";
    if (!f.ok()) {
      EXPECT_THAT(f.status().message(), HasSubstr("cut.gguf"));
    }
  }
}

TEST(Gguf, ReadsRealModelMetadata) {
  const std::string path = testing::SharedPath("models/stories260K/stories260K.gguf");
  CASCADE_REQUIRE_SHARED(path);
  auto f = GgufFile::Open(path);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(*(*f)->GetInt("llama.embedding_length"), 64);
  EXPECT_EQ((*f)->tensors().size(), 47u);
  EXPECT_EQ((*(*f)->GetArray("tokenizer.ggml.tokens"))->size, 512u);
}

}  // namespace
}  // namespace cascade
