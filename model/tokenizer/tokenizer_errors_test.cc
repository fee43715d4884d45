// Malformed vocabularies: each defect gives an error that names the file and the field.
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/tokenizer.h"
#include "nlohmann/json.hpp"

namespace cascade {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A small GGUF vocabulary whose fields a test can break one at a time.
struct GgufVocab {
  std::string model = "gpt2";
  std::optional<std::string> pre = "gpt-2";
  std::optional<std::vector<std::string>> tokens = std::vector<std::string>{"a",
                                                                            "b",
                                                                            "ab",
                                                                            "\xC4\xA0",
                                                                            "\xC4\xA0"
                                                                            "ab",
                                                                            "<|end|>"};
  std::optional<std::vector<int32_t>> types = std::vector<int32_t>{1, 1, 1, 1, 1, 3};
  std::optional<std::vector<std::string>> merges = std::vector<std::string>{"a b", "\xC4\xA0 ab"};
  std::optional<int32_t> bos = 5;
  std::optional<int32_t> eos = 5;
  bool scores_as_strings = false;

  absl::StatusOr<std::unique_ptr<Tokenizer>> Load() const {
    GgufWriter w;
    w.SetString("general.architecture", "llama");
    w.SetString("tokenizer.ggml.model", model);
    if (pre) w.SetString("tokenizer.ggml.pre", *pre);
    if (tokens) w.SetStringArray("tokenizer.ggml.tokens", *tokens);
    if (types) w.SetInt32Array("tokenizer.ggml.token_type", *types);
    if (merges) w.SetStringArray("tokenizer.ggml.merges", *merges);
    if (bos) w.SetUint32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
    if (eos) w.SetUint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*eos));
    if (scores_as_strings) w.SetStringArray("tokenizer.ggml.scores", {"x"});
    auto bytes = w.Serialize();
    if (!bytes.ok()) return bytes.status();
    auto file = GgufFile::Parse(*bytes, "bad.gguf");
    if (!file.ok()) return file.status();
    return Tokenizer::FromGguf(**file);
  }
};

TEST(TokenizerErrors, TheBaseGgufVocabularyIsValid) {
  auto tok = GgufVocab().Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("ab ab", false, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ::testing::ElementsAre(2, 4));
  EXPECT_EQ((*tok)->Describe(), "bpe:gpt-2");
  EXPECT_TRUE((*tok)->IsEndOfGeneration(5));
}

void ExpectError(const GgufVocab& v, absl::StatusCode code, const std::string& field,
                 const std::string& problem) {
  auto tok = v.Load();
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), code) << tok.status();
  EXPECT_THAT(std::string(tok.status().message()),
              AllOf(HasSubstr("bad.gguf"), HasSubstr(field), HasSubstr(problem)));
}

TEST(TokenizerErrors, GgufWithoutTokens) {
  GgufVocab v;
  v.tokens.reset();
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.tokens", "missing");
}

TEST(TokenizerErrors, GgufTokenTypeOfTheWrongLength) {
  GgufVocab v;
  v.types = std::vector<int32_t>{1, 1, 1};
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.token_type",
              "has 3 entries, but there are 6 tokens");
}

TEST(TokenizerErrors, GgufTokenTypeOutOfRange) {
  GgufVocab v;
  v.types = std::vector<int32_t>{1, 1, 9, 1, 1, 3};
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.token_type[2]",
              "token type 9");
}

TEST(TokenizerErrors, GgufBosOutOfRange) {
  GgufVocab v;
  v.bos = 6;
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.bos_token_id",
              "token id 6 is out of range");
}

TEST(TokenizerErrors, GgufMergeWithoutSpace) {
  GgufVocab v;
  v.merges = std::vector<std::string>{"a b", "ab"};
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.merges[1]",
              "no space between two tokens");
}

TEST(TokenizerErrors, GgufMergeOfUnknownTokens) {
  GgufVocab v;
  v.merges = std::vector<std::string>{"a c"};
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.merges[0]",
              "'c' is not in the vocabulary");
}

TEST(TokenizerErrors, GgufWithoutMerges) {
  GgufVocab v;
  v.merges.reset();
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.merges", "missing");
}

TEST(TokenizerErrors, GgufScoresOfTheWrongType) {
  GgufVocab v;
  v.scores_as_strings = true;
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.scores",
              "expected an array of numbers");
}

TEST(TokenizerErrors, GgufUnknownModelAndPreTokenizer) {
  GgufVocab v;
  v.model = "bert";
  ExpectError(v, absl::StatusCode::kUnimplemented, "tokenizer.ggml.model", "'bert'");
  GgufVocab p;
  p.pre = "no-such-pre";
  ExpectError(p, absl::StatusCode::kUnimplemented, "tokenizer.ggml.pre", "'no-such-pre'");
  GgufVocab d;
  d.pre.reset();  // absent: llama.cpp's default regexes
  auto tok = d.Load();
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Describe(), "bpe:default");
}

TEST(TokenizerErrors, GgufSpmByteTokenWithABadName) {
  GgufVocab v;
  v.model = "llama";
  v.types = std::vector<int32_t>{1, 6, 1, 1, 1, 3};
  ExpectError(v, absl::StatusCode::kInvalidArgument, "tokenizer.ggml.tokens[1]",
              "not of the form <0xHH>");
}

TEST(TokenizerErrors, InvalidUtf8TextIsRejected) {
  auto tok = GgufVocab().Load();
  ASSERT_TRUE(tok.ok());
  auto ids = (*tok)->Encode("ab\xC3", false, false);
  ASSERT_FALSE(ids.ok());
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(ids.status().message()), HasSubstr("byte 2"));
}

// tokenizer.json cases: written to a temporary file, loaded through the public API.
class JsonErrors : public ::testing::Test {
 protected:
  static nlohmann::json Base() {
    return nlohmann::json::parse(R"({
      "version": "1.0",
      "added_tokens": [{"id": 3, "content": "<s>", "special": true}],
      "normalizer": null,
      "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
      "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "<s>": 3},
                "merges": ["a b"]}
    })");
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& text,
                                                  const std::string& config = "") {
    // ctest runs these tests in parallel processes: one folder per process.
    const std::string dir = ::testing::TempDir() + "/tok_errors_" + std::to_string(::getpid());
    ::mkdir(dir.c_str(), 0755);
    path_ = dir + "/tok_errors_tokenizer.json";
    std::ofstream(path_, std::ios::binary) << text;
    std::string config_path;
    if (!config.empty()) {
      config_path = dir + "/tok_errors_tokenizer_config.json";
      std::ofstream(config_path, std::ios::binary) << config;
    }
    return Tokenizer::FromHfJson(path_, config_path);
  }
  void ExpectError(const std::string& text, absl::StatusCode code, const std::string& field,
                   const std::string& problem, const std::string& config = "") {
    auto tok = Load(text, config);
    ASSERT_FALSE(tok.ok()) << text;
    EXPECT_EQ(tok.status().code(), code) << tok.status();
    EXPECT_THAT(std::string(tok.status().message()),
                AllOf(HasSubstr("tok_errors_tokenizer"), HasSubstr(field), HasSubstr(problem)));
  }
  std::string path_;
};

TEST_F(JsonErrors, TheBaseFileIsValid) {
  auto tok = Load(Base().dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("ab<s>a", false, true);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ::testing::ElementsAre(2, 3, 0));
}

TEST_F(JsonErrors, NotJson) {
  ExpectError("{\"model\": ", absl::StatusCode::kInvalidArgument, "(file)", "not valid JSON");
  ExpectError("[1, 2]", absl::StatusCode::kInvalidArgument, "(file)", "expected an object");
}

TEST_F(JsonErrors, WrongTypes) {
  auto j = Base();
  j["model"]["vocab"]["ab"] = "two";
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.vocab[\"ab\"]",
              "expected a token id");
  j = Base();
  j["model"]["vocab"]["ab"] = -4;
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.vocab[\"ab\"]", "out of range");
  j = Base();
  j["model"]["byte_fallback"] = "yes";
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.byte_fallback",
              "expected true or false");
  j = Base();
  j["added_tokens"][0]["content"] = 7;
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "added_tokens[0].content",
              "expected a string");
  j = Base();
  j["model"]["vocab"]["ab"] = 2000000000;  // would need two billion token slots
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.vocab",
              "leaves most of the 2000000001 ids unused");
  j = Base();
  nlohmann::json nested = {{"type", "ByteLevel"}};
  for (int i = 0; i < 40; ++i) {
    nested = {{"type", "Sequence"}, {"pretokenizers", nlohmann::json::array({nested})}};
  }
  j["pre_tokenizer"] = nested;
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "pre_tokenizer.pretokenizers[0]",
              "nested too deeply");
  j = Base();
  j["model"]["vocab"]["b"] = 0;
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.vocab", "is also used by");
}

TEST_F(JsonErrors, BadMerges) {
  auto j = Base();
  j["model"]["merges"] = {"a b c"};
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.merges[0]",
              "not two tokens separated by one space");
  j["model"]["merges"] = {"a z"};
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.merges[0]",
              "'z' is not in model.vocab");
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"b", "a"})});
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.merges[0]",
              "the merged token 'ba'");
  j["model"]["merges"] = {12};
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.merges[0]",
              "expected \"left right\" or [left, right]");
  // Pair form, with a token containing a space.
  j["model"]["vocab"]["a b"] = 4;
  j["model"]["vocab"]["a bb"] = 5;
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"a b", "b"})});
  j["pre_tokenizer"] = nullptr;
  auto tok = Load(j.dump());
  ASSERT_TRUE(tok.ok()) << tok.status();
  auto ids = (*tok)->Encode("a bb", false, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ::testing::ElementsAre(0, 1, 1));  // "a b" is never formed from chars
}

TEST_F(JsonErrors, UnsupportedComponents) {
  auto j = Base();
  j["model"]["type"] = "WordPiece";
  ExpectError(j.dump(), absl::StatusCode::kUnimplemented, "model.type", "'WordPiece'");
  j = Base();
  j["normalizer"] = {{"type", "NFKD"}};
  ExpectError(j.dump(), absl::StatusCode::kUnimplemented, "normalizer", "'NFKD'");
  j = Base();
  j["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", {{{"type", "UnicodeScripts"}}}}};
  ExpectError(j.dump(), absl::StatusCode::kUnimplemented, "pre_tokenizer.pretokenizers[0]",
              "'UnicodeScripts'");
}

TEST_F(JsonErrors, BadRegex) {
  auto j = Base();
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"Regex", "(ab"}}}, {"behavior", "Isolated"}}}}};
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "pre_tokenizer.pretokenizers[0]",
              "missing closing parenthesis");
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "a"}};
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument,
              "pre_tokenizer.pretokenizers[0].behavior", "'Sideways'");
}

TEST_F(JsonErrors, BadUnknownTokenAndConfig) {
  auto j = Base();
  j["model"]["unk_token"] = "<unk>";
  ExpectError(j.dump(), absl::StatusCode::kInvalidArgument, "model.unk_token",
              "'<unk>' is not in model.vocab");
  auto tok = Load(Base().dump(), R"({"bos_token": "<bos>"})");
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(std::string(tok.status().message()),
              AllOf(HasSubstr("tok_errors_tokenizer_config.json"), HasSubstr("bos_token"),
                    HasSubstr("'<bos>' is not a token")));
  tok = Load(Base().dump(), R"({"add_bos_token": 1})");
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("add_bos_token"));
  tok = Load(Base().dump(), R"({"bos_token": {"content": "<s>"}, "add_bos_token": true})");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_id(), 3);
  EXPECT_TRUE((*tok)->add_bos());
}

TEST_F(JsonErrors, MissingFile) {
  auto tok = Tokenizer::FromHfJson(::testing::TempDir() + "/no_such_tokenizer.json", "");
  ASSERT_FALSE(tok.ok());
  EXPECT_THAT(std::string(tok.status().message()), HasSubstr("no_such_tokenizer.json"));
  auto path = Tokenizer::FromPath(::testing::TempDir() + "/no_such_model.gguf");
  ASSERT_FALSE(path.ok());
  EXPECT_THAT(std::string(path.status().message()), HasSubstr("no_such_model.gguf"));
}

}  // namespace
}  // namespace cascade
