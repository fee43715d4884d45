// Unit tests of the tokenizer's building blocks: regex translation, split behaviors, NFC,
// added-token matching, and a small tokenizer.json exercising Metaspace, lstrip, unknown
// tokens and post-processing.
#include <unistd.h>

#include <fstream>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "model/tokenizer.h"
#include "model/tokenizer/added_tokens.h"
#include "model/tokenizer/nfc.h"
#include "model/tokenizer/pretokenizer.h"
#include "model/tokenizer/regex.h"

namespace cascade::tok {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> Matches(const std::string& pattern, const std::string& text) {
  auto re = Regex::Compile(pattern);
  EXPECT_TRUE(re.ok()) << re.status();
  if (!re.ok()) return {};
  std::vector<Span> spans;
  EXPECT_TRUE((*re)->FindAll(text, &spans).ok());
  std::vector<std::string> out;
  for (const Span& s : spans) out.push_back(text.substr(s.begin, s.end - s.begin));
  return out;
}

TEST(Regex, TranslatesOnigurumaClasses) {
  EXPECT_EQ(*Regex::Translate(R"(\s+(?!\S))"), R"(\p{White_Space}+(?!\P{White_Space}))");
  EXPECT_EQ(*Regex::Translate(R"([^\s\p{L}\d])"), R"([^\p{White_Space}\p{L}\p{Nd}])");
  EXPECT_EQ(*Regex::Translate(R"(\u00e9\h)"), R"(\x{00e9}[0-9a-fA-F])");
  EXPECT_EQ(*Regex::Translate(R"((?m:a.b))"), R"((?s:a.b))");
  EXPECT_EQ(Regex::Translate(R"([\W])").status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(Regex::Translate(R"([a-z&&[^b]])").status().code(), absl::StatusCode::kUnimplemented);
  // Unicode white space: NEL and ideographic space are \s, zero-width space is not.
  EXPECT_THAT(Matches(R"(\s+)",
                      "a\xC2\x85\xE3\x80\x80"
                      "b\xE2\x80\x8B"
                      "c"),
              ElementsAre("\xC2\x85\xE3\x80\x80"));
  EXPECT_THAT(Matches(R"(\p{L}+|\p{N})", "ab12\xD0\xB4"), ElementsAre("ab", "1", "2", "\xD0\xB4"));
  EXPECT_THAT(Matches("(?i:'s|'t)", "it'S 't"), ElementsAre("'S", "'t"));
  // Empty matches are reported (SuperBPE-style lookahead splits).
  EXPECT_THAT(Matches(R"((?=(\d{3})+(?!\d)))", "1234567"), ElementsAre("", ""));
  EXPECT_THAT(Matches(Regex::Escape("a.b(c)"), "xa.b(c)a.b"), ElementsAre("a.b(c)"));
}

std::vector<std::string> Split(const std::string& text, SplitBehavior behavior) {
  // HF's own example: the pattern matches words and punctuation; inverted, the
  // delimiters are the spaces.
  auto re = Regex::Compile(R"(\w+|[^\w\s]+)");
  EXPECT_TRUE(re.ok());
  std::vector<Span> spans;
  EXPECT_TRUE((*re)->FindAll(text, &spans).ok());
  std::vector<std::string> out;
  for (const Span& s : SplitByMatches(text.size(), spans, behavior, /*invert=*/true)) {
    out.push_back(text.substr(s.begin, s.end - s.begin));
  }
  return out;
}

TEST(PreTokenizer, SplitBehaviorsMatchHuggingFace) {
  const std::string t = "How are you  doing?";
  EXPECT_THAT(Split(t, SplitBehavior::kRemoved), ElementsAre("How", "are", "you", "doing", "?"));
  EXPECT_THAT(Split(t, SplitBehavior::kIsolated),
              ElementsAre("How", " ", "are", " ", "you", "  ", "doing", "?"));
  EXPECT_THAT(Split(t, SplitBehavior::kMergedWithPrevious),
              ElementsAre("How ", "are ", "you  ", "doing", "?"));
  EXPECT_THAT(Split(t, SplitBehavior::kMergedWithNext),
              ElementsAre("How", " are", " you", "  doing", "?"));
  EXPECT_THAT(Split("a  b", SplitBehavior::kContiguous), ElementsAre("a", "  ", "b"));
}

TEST(PreTokenizer, ByteLevelAndMetaspace) {
  PreTokenizer bl;
  ASSERT_TRUE(bl.AddByteLevel(/*add_prefix_space=*/true, /*use_regex=*/true).ok());
  std::vector<PreToken> out;
  ASSERT_TRUE(bl.Run("Hi  there\n", true, &out).ok());
  std::vector<std::string> texts;
  for (const auto& p : out) texts.push_back(p.text);
  EXPECT_THAT(texts, ElementsAre("\xC4\xA0Hi", "\xC4\xA0", "\xC4\xA0there", "\xC4\x8A"));

  PreTokenizer ms;
  ms.AddMetaspace("\xE2\x96\x81", PrependScheme::kFirst, /*split=*/true);
  out.clear();
  ASSERT_TRUE(ms.Run("a  b", /*at_start=*/true, &out).ok());
  ASSERT_TRUE(ms.Run("c", /*at_start=*/false, &out).ok());
  texts.clear();
  for (const auto& p : out) texts.push_back(p.text);
  EXPECT_THAT(texts, ElementsAre("\xE2\x96\x81"
                                 "a",
                                 "\xE2\x96\x81",
                                 "\xE2\x96\x81"
                                 "b",
                                 "c"));
}

TEST(Nfc, ComposesReordersAndMapsSingletons) {
  EXPECT_EQ(*NfcNormalize("e\xCC\x81"), "\xC3\xA9");     // e + acute
  EXPECT_EQ(*NfcNormalize("\xE2\x84\xAB"), "\xC3\x85");  // Angstrom sign
  EXPECT_EQ(*NfcNormalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo
  EXPECT_EQ(*NfcNormalize("\xEA\xB0\x80\xE1\x86\xA8"), "\xEA\xB0\x81");              // LV + T
  // d + dot above + dot below -> (d + dot below) + dot above.
  EXPECT_EQ(*NfcNormalize("\xE1\xB8\x8B\xCC\xA3"), "\xE1\xB8\x8D\xCC\x87");
  // q + dot above + dot below: reordered, nothing to compose.
  EXPECT_EQ(*NfcNormalize("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
  // Composition exclusion: U+0344 decomposes and never recomposes.
  EXPECT_EQ(*NfcNormalize("\xCD\x84"), "\xCC\x88\xCC\x81");
  EXPECT_EQ(*NfcNormalize("plain ascii"), "plain ascii");
  EXPECT_FALSE(NfcNormalize("\xFF").ok());
}

TEST(AddedTokens, LeftmostLongestWithStripRules) {
  AddedTokenMatcher m;
  m.Add({.id = 1, .content = "<a>"});
  m.Add({.id = 2, .content = "<a><b>"});
  m.Add({.id = 3, .content = "<m>", .lstrip = true, .rstrip = true});
  m.Add({.id = 4, .content = "end", .single_word = true});
  m.Add({.id = 5, .content = "<s>", .special = true});
  auto split = [&](const std::string& text, bool parse_special) {
    std::vector<Fragment> f;
    m.Split(text, parse_special, &f);
    std::vector<std::string> out;
    for (const Fragment& x : f) {
      std::string piece;
      if (x.token >= 0) piece = absl::StrCat("#", x.token, ":");
      piece.append(text, x.begin, x.end - x.begin);
      out.push_back(std::move(piece));
    }
    return out;
  };
  EXPECT_THAT(split("x<a><b>y<a>", false), ElementsAre("x", "#2:<a><b>", "y", "#1:<a>"));
  EXPECT_THAT(split("x  <m>  y", false), ElementsAre("x", "#3:  <m>  ", "y"));
  EXPECT_THAT(split("the end, weekend", false), ElementsAre("the ", "#4:end", ", weekend"));
  EXPECT_THAT(split("<s>x", false), ElementsAre("<s>x"));
  EXPECT_THAT(split("<s>x", true), ElementsAre("#5:<s>", "x"));
}

// A small SentencePiece-like tokenizer.json (Metaspace, "first" prepend scheme).
class SmallJson : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path =
        ::testing::TempDir() + "/small_tokenizer_" + std::to_string(::getpid()) + ".json";
    std::ofstream(path, std::ios::binary) << R"({
      "added_tokens": [
        {"id": 0, "content": "<unk>", "special": true},
        {"id": 1, "content": "<s>", "special": true},
        {"id": 2, "content": "</s>", "special": true},
        {"id": 10, "content": "<mask>", "lstrip": true, "special": false, "normalized": false}],
      "normalizer": {"type": "NFC"},
      "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first",
                        "split": true},
      "post_processor": {"type": "TemplateProcessing",
        "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                   {"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]},
                           "</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
      "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first"},
      "model": {"type": "BPE", "unk_token": "<unk>", "fuse_unk": true,
        "vocab": {"<unk>": 0, "<s>": 1, "</s>": 2, "\u2581": 3, "h": 4, "i": 5, "\u2581h": 6,
                  "\u2581hi": 7, "\u00e9": 8, "x": 9},
        "merges": ["\u2581 h", "\u2581h i"]}
    })";
    auto tok = Tokenizer::FromHfJson(path, "");
    ASSERT_TRUE(tok.ok()) << tok.status();
    tok_ = std::move(*tok);
  }
  std::vector<int32_t> Encode(const std::string& text, bool add_special = false) {
    auto ids = tok_->Encode(text, add_special, /*parse_special=*/true);
    EXPECT_TRUE(ids.ok()) << ids.status();
    return ids.ok() ? *ids : std::vector<int32_t>{};
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(SmallJson, EncodesLikeHuggingFace) {
  EXPECT_TRUE(tok_->add_bos());
  EXPECT_TRUE(tok_->add_eos());
  EXPECT_THAT(Encode("hi", true), ElementsAre(1, 7, 2));
  EXPECT_THAT(Encode("hi hi"), ElementsAre(7, 7));
  EXPECT_THAT(Encode("<mask>hi"), ElementsAre(10, 4, 5));      // "first": no prefix mid-text
  EXPECT_THAT(Encode("hi   <mask>x"), ElementsAre(7, 10, 9));  // lstrip eats the spaces
  EXPECT_THAT(Encode("e\xCC\x81"), ElementsAre(3, 8));         // NFC, then the prefix
  EXPECT_THAT(Encode("QQ x"), ElementsAre(3, 0, 3, 9));        // fused unknown characters
  EXPECT_EQ(tok_->Decode(Encode("hi hi")), "hi hi");
  EXPECT_EQ(tok_->Kind(0), TokenKind::kUnknown);
  EXPECT_EQ(tok_->Kind(1), TokenKind::kControl);
  EXPECT_EQ(tok_->Kind(10), TokenKind::kUserDefined);
}

}  // namespace
}  // namespace cascade::tok
