// Reference-vector tests: every vocabulary in ../shared/testdata must reproduce the ids of
// Hugging Face tokenizers / SentencePiece exactly, and the stories260K tokenizer.json must
// agree with its GGUF.
#include "model/tokenizer.h"

#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/gguf.h"
#include "model/gguf_writer.h"
#include "model/test_util.h"
#include "nlohmann/json.hpp"

namespace cascade {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Inputs: the .inp file split on "\n__ggml_vocab_test__\n" (it ends with a separator).
std::vector<std::string> ReadInputs(const std::string& path) {
  std::vector<std::string> parts =
      absl::StrSplit(ReadAll(path), absl::ByString("\n__ggml_vocab_test__\n"));
  if (!parts.empty() && parts.back().empty()) parts.pop_back();
  return parts;
}

// Expected ids: one line per input, space-separated.
std::vector<std::vector<int32_t>> ReadExpected(const std::string& path) {
  std::vector<std::vector<int32_t>> out;
  std::string text = ReadAll(path);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<int32_t> ids;
    for (absl::string_view word : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
      int32_t id = -1;
      EXPECT_TRUE(absl::SimpleAtoi(word, &id)) << path << ": bad id '" << word << "'";
      ids.push_back(id);
    }
    out.push_back(std::move(ids));
  }
  return out;
}

std::string Escaped(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  return out;
}

struct VectorCase {
  const char* name;
  const char* vocab;     // relative to the shared folder: a .gguf or a folder
  const char* inputs;    // .inp
  const char* expected;  // .out
};

class VocabVectors : public ::testing::TestWithParam<VectorCase> {};

const Tokenizer* Shared(const std::string& rel);

absl::StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& path) {
  return Tokenizer::FromPath(path);
}

TEST_P(VocabVectors, EveryLineMatches) {
  const VectorCase& c = GetParam();
  const std::string vocab = testing::SharedPath(c.vocab);
  CASCADE_REQUIRE_SHARED(vocab);
  auto tok = Load(vocab);
  ASSERT_TRUE(tok.ok()) << tok.status();
  const auto inputs = ReadInputs(testing::SharedPath(c.inputs));
  const auto expected = ReadExpected(testing::SharedPath(c.expected));
  ASSERT_EQ(inputs.size(), expected.size());
  ASSERT_GT(inputs.size(), 40u);
  // No input spells a special token, so parsing special tokens must not change a line: the
  // references (Hugging Face tokenizers, which always split out added tokens, and
  // SentencePiece) hold for both passes.
  size_t matched[2] = {0, 0};  // [parse_special]
  std::string first_mismatch[2];
  for (size_t i = 0; i < inputs.size(); ++i) {
    for (bool parse_special : {false, true}) {
      auto ids = (*tok)->Encode(inputs[i], /*add_special=*/false, parse_special);
      ASSERT_TRUE(ids.ok()) << ids.status();
      if (*ids == expected[i]) {
        ++matched[parse_special];
      } else if (first_mismatch[parse_special].empty()) {
        first_mismatch[parse_special] =
            absl::StrCat("line ", i + 1, " '", Escaped(inputs[i]),
                         "'\n  expected: ", absl::StrJoin(expected[i], " "),
                         "\n  got:      ", absl::StrJoin(*ids, " "));
      }
    }
  }
  std::cout << "[ " << c.name << " ] " << matched[0] << "/" << inputs.size() << " lines match ("
            << matched[1] << " with parse_special)\n";
  EXPECT_EQ(matched[0], inputs.size()) << "first mismatch: " << first_mismatch[0];
  EXPECT_EQ(matched[1], inputs.size())
      << "parse_special=true, first mismatch: " << first_mismatch[1];
}

// The vocabulary's BOS token, found from the file itself (not through the tokenizer): GGUF
// tokenizer.ggml.bos_token_id and tokenizer.ggml.tokens, or tokenizer_config.json's
// bos_token and tokenizer.json's added_tokens.
struct BosToken {
  int32_t id = -1;
  std::string text;
};

BosToken BosFromFile(const std::string& path) {
  BosToken b;
  if (path.size() > 5 && path.substr(path.size() - 5) == ".gguf") {
    auto f = GgufFile::Open(path);
    EXPECT_TRUE(f.ok()) << f.status();
    if (!f.ok()) return b;
    auto id = (*f)->GetInt("tokenizer.ggml.bos_token_id");
    auto tokens = (*f)->GetArray("tokenizer.ggml.tokens");
    EXPECT_TRUE(id.ok() && tokens.ok()) << path;
    if (!id.ok() || !tokens.ok()) return b;
    b.id = static_cast<int32_t>(*id);
    b.text = (*tokens)->strings.at(b.id);
    return b;
  }
  const auto config =
      nlohmann::json::parse(ReadAll(path + "/tokenizer_config.json"), nullptr, false);
  const auto tj = nlohmann::json::parse(ReadAll(path + "/tokenizer.json"), nullptr, false);
  const auto& bos = config["bos_token"];
  b.text = bos.is_string() ? bos.get<std::string>() : bos["content"].get<std::string>();
  for (const auto& t : tj["added_tokens"]) {
    if (t["content"] == b.text) b.id = t["id"].get<int32_t>();
  }
  return b;
}

// The BOS token spelled in text is that one id with parse_special, and ordinary text
// (pieces that decode back to the spelling) without it; the text around it is encoded as
// it would be alone.
TEST_P(VocabVectors, SpelledBosIsParsedOnlyWithParseSpecial) {
  const VectorCase& c = GetParam();
  const std::string vocab = testing::SharedPath(c.vocab);
  CASCADE_REQUIRE_SHARED(vocab);
  const Tokenizer* tok = Shared(c.vocab);
  ASSERT_NE(tok, nullptr);
  const BosToken bos = BosFromFile(vocab);
  ASSERT_GE(bos.id, 0) << c.name;
  ASSERT_FALSE(bos.text.empty());
  EXPECT_EQ(tok->bos_id(), bos.id) << c.name;

  auto alone = tok->Encode(bos.text, false, /*parse_special=*/true);
  ASSERT_TRUE(alone.ok()) << alone.status();
  EXPECT_THAT(*alone, ::testing::ElementsAre(bos.id)) << c.name << " '" << bos.text << "'";

  auto as_text = tok->Encode(bos.text, false, /*parse_special=*/false);
  ASSERT_TRUE(as_text.ok()) << as_text.status();
  EXPECT_GT(as_text->size(), 1u) << c.name;
  EXPECT_THAT(*as_text, ::testing::Not(::testing::Contains(bos.id))) << c.name;
  // SentencePiece adds its dummy-prefix space in front of the text.
  std::string decoded = tok->Decode(*as_text);
  if (!decoded.empty() && decoded[0] == ' ' && bos.text[0] != ' ') decoded.erase(0, 1);
  EXPECT_EQ(decoded, bos.text) << c.name;

  // In running text: "Hello" BOS "world" = Encode("Hello") + [BOS] + Encode("world").
  const std::string text = "Hello" + bos.text + "world";
  auto parsed = tok->Encode(text, false, /*parse_special=*/true);
  auto left = tok->Encode("Hello", false, false);
  auto right = tok->Encode("world", false, false);
  ASSERT_TRUE(parsed.ok() && left.ok() && right.ok());
  std::vector<int32_t> want = *left;
  want.push_back(bos.id);
  want.insert(want.end(), right->begin(), right->end());
  EXPECT_EQ(*parsed, want) << c.name;
  auto unparsed = tok->Encode(text, false, /*parse_special=*/false);
  ASSERT_TRUE(unparsed.ok());
  EXPECT_THAT(*unparsed, ::testing::Not(::testing::Contains(bos.id))) << c.name;
}

INSTANTIATE_TEST_SUITE_P(
    Shared, VocabVectors,
    ::testing::Values(VectorCase{"llama_spm", "testdata/tokenizer/ggml-vocab-llama-spm.gguf",
                                 "testdata/tokenizer/ggml-vocab-llama-spm.gguf.inp",
                                 "testdata/tokenizer/ggml-vocab-llama-spm.gguf.out"},
                      VectorCase{"gpt2", "testdata/tokenizer/ggml-vocab-gpt-2.gguf",
                                 "testdata/tokenizer/ggml-vocab-gpt-2.gguf.inp",
                                 "testdata/tokenizer/ggml-vocab-gpt-2.gguf.out"},
                      VectorCase{"starcoder", "testdata/tokenizer/ggml-vocab-starcoder.gguf",
                                 "testdata/tokenizer/ggml-vocab-starcoder.gguf.inp",
                                 "testdata/tokenizer/ggml-vocab-starcoder.gguf.out"},
                      VectorCase{"deepseek_coder",
                                 "testdata/tokenizer/ggml-vocab-deepseek-coder.gguf",
                                 "testdata/tokenizer/ggml-vocab-deepseek-coder.gguf.inp",
                                 "testdata/tokenizer/ggml-vocab-deepseek-coder.gguf.out"},
                      VectorCase{"llama3_json", "testdata/tokenizer-hf/llama3",
                                 "testdata/tokenizer-hf/llama3/vectors.inp",
                                 "testdata/tokenizer-hf/llama3/vectors.out"}),
    [](const ::testing::TestParamInfo<VectorCase>& info) { return std::string(info.param.name); });

// Loads each shared vocabulary once (the Llama-3 tokenizer.json takes ~1 s to parse).
const Tokenizer* Shared(const std::string& rel) {
  static auto* cache = new std::map<std::string, std::unique_ptr<Tokenizer>>();
  auto it = cache->find(rel);
  if (it == cache->end()) {
    auto tok = Tokenizer::FromPath(testing::SharedPath(rel));
    EXPECT_TRUE(tok.ok()) << tok.status();
    it = cache->emplace(rel, tok.ok() ? std::move(*tok) : nullptr).first;
  }
  return it->second.get();
}

constexpr const char* kAllVocabs[] = {
    "testdata/tokenizer/ggml-vocab-llama-spm.gguf",
    "testdata/tokenizer/ggml-vocab-gpt-2.gguf",
    "testdata/tokenizer/ggml-vocab-starcoder.gguf",
    "testdata/tokenizer/ggml-vocab-deepseek-coder.gguf",
    "testdata/tokenizer-hf/llama3",
    "models/stories260K/stories260K.gguf",
    "models/stories260K/hf",
};

std::vector<std::string> SharedTexts() {
  std::vector<std::string> texts =
      ReadInputs(testing::SharedPath("testdata/tokenizer/ggml-vocab-llama-spm.gguf.inp"));
  for (const char* f : {"models/stories260K/greedy.txt", "models/stories260K/prompt-greedy.txt"}) {
    texts.push_back(ReadAll(testing::SharedPath(f)));
  }
  texts.push_back("<s> Hello</s> <unk> world <|begin_of_text|>x<|eot_id|>");
  return texts;
}

TEST(Stories260K, TokenizerJsonMatchesGguf) {
  const std::string gguf = "models/stories260K/stories260K.gguf";
  const std::string hf = "models/stories260K/hf";
  CASCADE_REQUIRE_SHARED(testing::SharedPath(gguf));
  CASCADE_REQUIRE_SHARED(testing::SharedPath(hf));
  const Tokenizer* a = Shared(gguf);
  const Tokenizer* b = Shared(hf);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->Describe(), "spm");
  EXPECT_EQ(b->Describe(), "bpe:tokenizer.json");
  ASSERT_EQ(a->vocab_size(), b->vocab_size());
  EXPECT_EQ(a->bos_id(), b->bos_id());
  EXPECT_EQ(a->eos_id(), b->eos_id());
  EXPECT_TRUE(a->add_bos());
  EXPECT_TRUE(b->add_bos());
  for (int32_t id = 0; id < a->vocab_size(); ++id) {
    EXPECT_EQ(a->TokenText(id), b->TokenText(id)) << id;
    EXPECT_EQ(a->Kind(id), b->Kind(id)) << id;
    EXPECT_EQ(a->TokenToPiece(id, true), b->TokenToPiece(id, true)) << id;
  }
  size_t compared = 0;
  for (const std::string& text : SharedTexts()) {
    for (bool add_special : {false, true}) {
      for (bool parse_special : {false, true}) {
        auto ia = a->Encode(text, add_special, parse_special);
        auto ib = b->Encode(text, add_special, parse_special);
        ASSERT_TRUE(ia.ok()) << ia.status();
        ASSERT_TRUE(ib.ok()) << ib.status();
        EXPECT_EQ(*ia, *ib) << "text '" << Escaped(text) << "' add_special=" << add_special
                            << " parse_special=" << parse_special;
        EXPECT_EQ(a->Decode(*ia), b->Decode(*ib));
        ++compared;
      }
    }
  }
  EXPECT_GT(compared, 150u);
  // The model's own prompt ids (llama2.c run.c) for the prompt used by its reference runs.
  for (const Tokenizer* t : {a, b}) {
    auto ids = t->Encode("Once upon a time", /*add_special=*/true, /*parse_special=*/false);
    ASSERT_TRUE(ids.ok());
    EXPECT_THAT(*ids, ::testing::ElementsAre(1, 403, 407, 261, 378)) << t->Describe();
  }
}

TEST(Tokenizer, SpecialTokensAndBos) {
  const std::string spm = "testdata/tokenizer/ggml-vocab-llama-spm.gguf";
  CASCADE_REQUIRE_SHARED(testing::SharedPath(spm));
  const Tokenizer* t = Shared(spm);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->bos_id(), 1);
  EXPECT_EQ(t->eos_id(), 2);
  EXPECT_TRUE(t->IsEndOfGeneration(2));
  EXPECT_FALSE(t->IsEndOfGeneration(1));
  auto plain = t->Encode("Hello world", true, false);
  ASSERT_TRUE(plain.ok());
  EXPECT_THAT(*plain, ::testing::ElementsAre(1, 15043, 3186));
  // "<s>" is text unless special tokens are parsed; a dummy prefix follows each token.
  auto as_text = t->Encode("<s>Hello", false, false);
  auto as_token = t->Encode("<s>Hello", false, true);
  ASSERT_TRUE(as_text.ok());
  ASSERT_TRUE(as_token.ok());
  EXPECT_THAT(*as_token, ::testing::ElementsAre(1, 15043));
  EXPECT_NE(as_text->front(), 1);
  EXPECT_EQ(t->Decode(*as_token), "Hello");
  EXPECT_EQ(t->Decode(*as_token, /*render_special=*/true), "<s> Hello");

  const std::string llama3 = "testdata/tokenizer-hf/llama3";
  CASCADE_REQUIRE_SHARED(testing::SharedPath(llama3));
  const Tokenizer* l3 = Shared(llama3);
  ASSERT_NE(l3, nullptr);
  EXPECT_EQ(l3->bos_id(), 128000);
  EXPECT_EQ(l3->eos_id(), 128001);
  auto chat = l3->Encode("<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", false, true);
  ASSERT_TRUE(chat.ok());
  EXPECT_THAT(*chat, ::testing::ElementsAre(128006, 882, 128007, 271, 13347, 128009));
  EXPECT_TRUE(l3->IsEndOfGeneration(128009));
  EXPECT_TRUE(l3->IsEndOfGeneration(128001));
  auto unparsed = l3->Encode("<|eot_id|>", false, false);
  ASSERT_TRUE(unparsed.ok());
  EXPECT_GT(unparsed->size(), 1u);
}

TEST(Tokenizer, DecodeInvertsEncode) {
  for (const char* rel : kAllVocabs) {
    CASCADE_REQUIRE_SHARED(testing::SharedPath(rel));
    const Tokenizer* t = Shared(rel);
    ASSERT_NE(t, nullptr) << rel;
    for (const std::string& text : SharedTexts()) {
      auto ids = t->Encode(text, /*add_special=*/true, /*parse_special=*/false);
      ASSERT_TRUE(ids.ok()) << rel << ": " << ids.status();
      EXPECT_EQ(t->Decode(*ids), text) << rel << " ids " << absl::StrJoin(*ids, " ");
    }
  }
}

bool ValidUtf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (int k = 1; k < n; ++k) {
      if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

TEST(StreamingDetokenizer, NeverSplitsACharacterAndMatchesDecode) {
  for (const char* rel : kAllVocabs) {
    CASCADE_REQUIRE_SHARED(testing::SharedPath(rel));
    const Tokenizer* t = Shared(rel);
    ASSERT_NE(t, nullptr) << rel;
    size_t held_back = 0;  // pushes that returned nothing while a character was incomplete
    for (const std::string& text : SharedTexts()) {
      auto ids = t->Encode(text, /*add_special=*/true, /*parse_special=*/false);
      ASSERT_TRUE(ids.ok());
      StreamingDetokenizer stream(*t);
      std::string streamed;
      for (int32_t id : *ids) {
        const std::string piece = stream.Push(id);
        EXPECT_TRUE(ValidUtf8(piece)) << rel << ": invalid UTF-8 after id " << id;
        if (piece.empty() && !t->TokenToPiece(id, false).empty()) ++held_back;
        streamed += piece;
      }
      streamed += stream.Flush();
      EXPECT_EQ(streamed, t->Decode(*ids)) << rel << ": '" << Escaped(text) << "'";
    }
    EXPECT_GT(held_back, 0u) << rel << ": no test text split a character across tokens";
  }
}

TEST(StreamingDetokenizer, PromptSetsLeadingSpaceState) {
  const std::string spm = "testdata/tokenizer/ggml-vocab-llama-spm.gguf";
  CASCADE_REQUIRE_SHARED(testing::SharedPath(spm));
  const Tokenizer* t = Shared(spm);
  ASSERT_NE(t, nullptr);
  auto prompt = t->Encode("Hello", true, false);
  auto next = t->Encode("world", false, false);  // "▁world"
  ASSERT_TRUE(prompt.ok() && next.ok());
  StreamingDetokenizer fresh(*t);
  StreamingDetokenizer after_prompt(*t, *prompt);
  std::string a, b;
  for (int32_t id : *next) {
    a += fresh.Push(id);
    b += after_prompt.Push(id);
  }
  EXPECT_EQ(a, "world");
  EXPECT_EQ(b, " world");
  // Invalid sequences come out as U+FFFD, never as raw bytes.
  StreamingDetokenizer bytes(*t);
  EXPECT_EQ(bytes.Push(3 + 0xF0), "");  // <0xF0>: first byte of a 4-byte character
  EXPECT_EQ(bytes.Push(3 + 0x9F), "");
  EXPECT_EQ(bytes.Push(3 + 0x41),
            "\xEF\xBF\xBD\xEF\xBF\xBD"
            "A");
  EXPECT_EQ(bytes.Push(3 + 0xE2), "");
  EXPECT_EQ(bytes.Flush(), "\xEF\xBF\xBD");
}

// Encoding time grows linearly with the text: eight times the text takes about eight times
// as long, not sixty-four (a quadratic merge or regex would). Measured as a ratio on this
// machine, so the check holds on a slow one and under sanitizers alike.
TEST(Tokenizer, EncodingTimeGrowsLinearlyWithTheText) {
  const std::string llama3 = "testdata/tokenizer-hf/llama3";
  CASCADE_REQUIRE_SHARED(testing::SharedPath(llama3));
  const Tokenizer* t = Shared(llama3);
  ASSERT_NE(t, nullptr);
  std::string text;
  for (const std::string& s : SharedTexts()) text += s;
  while (text.size() < 20000) text += text;
  text.resize(20000);
  std::string eight;
  for (int i = 0; i < 8; ++i) eight += text;
  auto best_ms = [&](const std::string& x, size_t* tokens) {
    double best = 1e300;
    for (int round = 0; round < 5; ++round) {
      const auto start = std::chrono::steady_clock::now();
      auto ids = t->Encode(x, true, true);
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - start).count();
      EXPECT_TRUE(ids.ok());
      if (ids.ok()) *tokens = ids->size();
      best = std::min(best, ms);
    }
    return best;
  };
  size_t n1 = 0, n8 = 0;
  const double t1 = best_ms(text, &n1), t8 = best_ms(eight, &n8);
  EXPECT_GT(n1, 3000u);
  EXPECT_GT(n8, 7 * n1);
  EXPECT_LT(t8, 24 * t1 + 5.0) << n1 << " tokens in " << t1 << " ms, " << n8 << " in " << t8;
  std::cout << "[ llama3 ] " << n1 << " tokens in " << t1 << " ms; " << n8 << " in " << t8
            << " ms\n";
}

TEST(Tokenizer, LongRunsRoundTrip) {
  // Long single pre-tokens stress the regex engine's stack and the merge queues.
  for (const char* rel : kAllVocabs) {
    CASCADE_REQUIRE_SHARED(testing::SharedPath(rel));
    const Tokenizer* t = Shared(rel);
    ASSERT_NE(t, nullptr) << rel;
    for (const std::string& text :
         {std::string(50000, ' '), std::string(50000, 'a'), std::string(20000, '7'),
          std::string(20000, '!') + std::string(20000, '\n') + "x"}) {
      auto ids = t->Encode(text, true, true);
      ASSERT_TRUE(ids.ok()) << rel << ": " << ids.status();
      EXPECT_EQ(t->Decode(*ids), text) << rel;
    }
  }
}

// The same Llama-3 vocabulary converted to GGUF (as convert_hf_to_gguf.py would write it,
// pre-tokenizer "llama-bpe") must reproduce the reference ids too.
TEST(Llama3, GgufConversionMatchesVectors) {
  const std::string dir = "testdata/tokenizer-hf/llama3";
  CASCADE_REQUIRE_SHARED(testing::SharedPath(dir));
  const Tokenizer* hf = Shared(dir);
  ASSERT_NE(hf, nullptr);
  const nlohmann::json j =
      nlohmann::json::parse(ReadAll(testing::SharedPath(dir + "/tokenizer.json")), nullptr, false);
  ASSERT_TRUE(j.is_object());
  std::vector<std::string> tokens, merges;
  std::vector<int32_t> types;
  for (int32_t id = 0; id < hf->vocab_size(); ++id) {
    tokens.push_back(hf->TokenText(id));
    types.push_back(static_cast<int32_t>(hf->Kind(id)));
  }
  for (const auto& m : j["model"]["merges"]) merges.push_back(m.get<std::string>());
  GgufWriter w;
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", "llama-bpe");
  w.SetStringArray("tokenizer.ggml.tokens", tokens);
  w.SetInt32Array("tokenizer.ggml.token_type", types);
  w.SetStringArray("tokenizer.ggml.merges", merges);
  w.SetUint32("tokenizer.ggml.bos_token_id", 128000);
  w.SetUint32("tokenizer.ggml.eos_token_id", 128001);
  auto bytes = w.Serialize();
  ASSERT_TRUE(bytes.ok());
  auto file = GgufFile::Parse(*bytes, "llama3.gguf");
  ASSERT_TRUE(file.ok()) << file.status();
  auto gguf = Tokenizer::FromGguf(**file);
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  EXPECT_EQ((*gguf)->Describe(), "bpe:llama-bpe");
  EXPECT_TRUE((*gguf)->add_bos());  // llama.cpp's default for llama-bpe
  const auto inputs = ReadInputs(testing::SharedPath(dir + "/vectors.inp"));
  const auto expected = ReadExpected(testing::SharedPath(dir + "/vectors.out"));
  ASSERT_EQ(inputs.size(), expected.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto ids = (*gguf)->Encode(inputs[i], false, false);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(*ids, expected[i]) << "line " << i + 1 << " '" << Escaped(inputs[i]) << "'";
    EXPECT_EQ((*gguf)->Decode(*ids), inputs[i]);
  }
}

TEST(Tokenizer, EncodeIsThreadSafe) {
  std::vector<const Tokenizer*> toks;
  for (const char* rel : kAllVocabs) {
    CASCADE_REQUIRE_SHARED(testing::SharedPath(rel));
    toks.push_back(Shared(rel));
    ASSERT_NE(toks.back(), nullptr);
  }
  const std::vector<std::string> texts = SharedTexts();
  std::vector<std::vector<std::vector<int32_t>>> want(toks.size());
  for (size_t t = 0; t < toks.size(); ++t) {
    for (const std::string& text : texts) want[t].push_back(*toks[t]->Encode(text, true, true));
  }
  std::atomic<int> mismatches{0};
  std::vector<std::thread> threads;
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&, k] {
      for (int round = 0; round < 5; ++round) {
        for (size_t t = 0; t < toks.size(); ++t) {
          for (size_t i = (k + round) % 3; i < texts.size(); i += 3) {
            auto ids = toks[t]->Encode(texts[i], true, true);
            if (!ids.ok() || *ids != want[t][i]) ++mismatches;
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}
}  // namespace
}  // namespace cascade
