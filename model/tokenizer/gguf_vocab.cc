// GGUF tokenizer metadata (tokenizer.ggml.*) -> VocabSpec.
#include "absl/strings/str_cat.h"
#include "model/tokenizer/loaders.h"
#include "model/tokenizer/named_pretokenizers.h"
#include "model/tokenizer/text_util.h"
#include "util/status_macros.h"

namespace cascade::tok {
namespace {

constexpr char kPrefix[] = "tokenizer.ggml.";

absl::Status Invalid(const GgufFile& f, std::string_view key, const std::string& problem) {
  return absl::InvalidArgumentError(absl::StrCat(f.path(), ": ", std::string(key), ": ", problem));
}

// An optional array key: null if absent; an error if present with the wrong element type
// or length (`expected` = 0: any length).
absl::StatusOr<const GgufArray*> OptionalArray(const GgufFile& f, std::string_view key,
                                               bool strings, uint64_t expected) {
  if (f.Find(key) == nullptr) return nullptr;
  CASCADE_ASSIGN_OR_RETURN(const GgufArray* a, f.GetArray(key));
  if (strings ? a->elem_type != GgufType::kString : (!a->is_integer() && !a->is_float())) {
    return Invalid(f, key,
                   absl::StrCat("expected an array of ", strings ? "strings" : "numbers",
                                ", found an array of ", GgufTypeName(a->elem_type)));
  }
  if (expected != 0 && a->size != expected) {
    return Invalid(f, key,
                   absl::StrCat("has ", a->size, " entries, but there are ", expected, " tokens"));
  }
  return a;
}

// An optional token id: -1 when absent or negative; an error when >= n.
absl::StatusOr<int32_t> OptionalId(const GgufFile& f, const std::string& key, size_t n) {
  CASCADE_ASSIGN_OR_RETURN(int64_t v, f.GetIntOr(key, -1));
  if (v < 0) return -1;
  if (v >= static_cast<int64_t>(n)) {
    return Invalid(f, key,
                   absl::StrCat("token id ", v, " is out of range (vocabulary size ", n, ")"));
  }
  return static_cast<int32_t>(v);
}

}  // namespace

absl::StatusOr<VocabSpec> LoadGgufVocab(const GgufFile& f) {
  VocabSpec spec;
  spec.source = f.path();
  const std::string model_key = absl::StrCat(kPrefix, "model");
  if (f.Find(model_key) == nullptr) {
    return Invalid(f, model_key, "missing (the file has no tokenizer)");
  }
  CASCADE_ASSIGN_OR_RETURN(const std::string model, f.GetString(model_key));
  if (model == "llama") {
    spec.model = VocabSpec::Model::kSpm;
  } else if (model == "gpt2") {
    spec.model = VocabSpec::Model::kBpe;
  } else {
    return absl::UnimplementedError(absl::StrCat(
        f.path(), ": ", model_key, ": tokenizer model '", model,
        "' is not supported (supported: 'llama' SentencePiece, 'gpt2' byte-level BPE)"));
  }

  // Tokens, kinds, scores.
  const std::string tokens_key = absl::StrCat(kPrefix, "tokens");
  if (f.Find(tokens_key) == nullptr) return Invalid(f, tokens_key, "missing");
  CASCADE_ASSIGN_OR_RETURN(const GgufArray* tokens, OptionalArray(f, tokens_key, true, 0));
  if (tokens->size == 0) return Invalid(f, tokens_key, "is empty");
  if (tokens->size > static_cast<uint64_t>(INT32_MAX)) {
    return Invalid(f, tokens_key, absl::StrCat("has ", tokens->size, " tokens, too many"));
  }
  const size_t n = tokens->size;
  spec.tokens = tokens->strings;
  spec.kinds.assign(n, TokenKind::kNormal);

  const std::string types_key = absl::StrCat(kPrefix, "token_type");
  CASCADE_ASSIGN_OR_RETURN(const GgufArray* types, OptionalArray(f, types_key, false, n));
  if (types != nullptr) {
    if (!types->is_integer()) return Invalid(f, types_key, "expected integer token types");
    for (size_t i = 0; i < n; ++i) {
      const int64_t t = types->GetInt(i);
      if (t < 0 || t > 6) {
        return Invalid(f, absl::StrCat(types_key, "[", i, "]"),
                       absl::StrCat("token type ", t, " is not one of 0..6"));
      }
      spec.kinds[i] = static_cast<TokenKind>(t);
      if (spec.kinds[i] == TokenKind::kByte && ParseByteToken(spec.tokens[i]) < 0) {
        return Invalid(f, absl::StrCat(tokens_key, "[", i, "]"),
                       absl::StrCat("byte token '", spec.tokens[i], "' is not of the form <0xHH>"));
      }
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (spec.tokens[i].empty() && spec.kinds[i] != TokenKind::kUnused) {
      return Invalid(f, absl::StrCat(tokens_key, "[", i, "]"), "empty token text");
    }
  }

  const std::string scores_key = absl::StrCat(kPrefix, "scores");
  CASCADE_ASSIGN_OR_RETURN(const GgufArray* scores, OptionalArray(f, scores_key, false, n));
  if (scores != nullptr) {
    spec.scores.resize(n);
    for (size_t i = 0; i < n; ++i) spec.scores[i] = static_cast<float>(scores->GetFloat(i));
  }

  // Special ids.
  CASCADE_ASSIGN_OR_RETURN(spec.bos_id, OptionalId(f, absl::StrCat(kPrefix, "bos_token_id"), n));
  CASCADE_ASSIGN_OR_RETURN(spec.eos_id, OptionalId(f, absl::StrCat(kPrefix, "eos_token_id"), n));
  CASCADE_ASSIGN_OR_RETURN(spec.unk_id,
                           OptionalId(f, absl::StrCat(kPrefix, "unknown_token_id"), n));
  for (const char* key : {"eot_token_id", "eom_token_id"}) {
    CASCADE_ASSIGN_OR_RETURN(int32_t id, OptionalId(f, absl::StrCat(kPrefix, key), n));
    if (id >= 0) spec.eog_ids.push_back(id);
  }

  // Special and user-defined tokens are split out of the raw text (llama.cpp's rule:
  // control and unknown tokens only when parsing special tokens, user-defined always).
  for (size_t i = 0; i < n; ++i) {
    const TokenKind k = spec.kinds[i];
    if (k != TokenKind::kControl && k != TokenKind::kUserDefined && k != TokenKind::kUnknown) {
      continue;
    }
    AddedTokenSpec t;
    t.id = static_cast<int32_t>(i);
    t.content = spec.tokens[i];
    t.special = k != TokenKind::kUserDefined;
    spec.added_tokens.push_back(std::move(t));
  }

  bool add_bos = false;
  const std::string pre_key = absl::StrCat(kPrefix, "pre");
  std::string pre;
  if (f.Find(pre_key) != nullptr) {
    CASCADE_ASSIGN_OR_RETURN(pre, f.GetString(pre_key));
  }
  if (spec.model == VocabSpec::Model::kSpm) {
    CASCADE_ASSIGN_OR_RETURN(const bool add_space_prefix,
                             f.GetBoolOr(absl::StrCat(kPrefix, "add_space_prefix"), true));
    spec.describe = "spm";
    spec.normalizer = std::make_unique<Normalizer>();
    if (add_space_prefix) spec.normalizer->AddPrepend("\xE2\x96\x81");
    CASCADE_RETURN_IF_ERROR(spec.normalizer->AddReplace(" ", false, "\xE2\x96\x81"));
    spec.piece_style = PieceStyle::kSentencePiece;
    spec.strip_leading_space = add_space_prefix;
    add_bos = true;
  } else {
    const NamedPreTokenizer* named = FindNamedPreTokenizer(pre);
    if (named == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat(f.path(), ": ", pre_key, ": pre-tokenizer '", pre,
                       "' is not supported (supported: ", SupportedPreTokenizerNames(), ")"));
    }
    spec.describe = absl::StrCat("bpe:", pre.empty() ? "default" : pre);
    spec.pre_tokenizer = std::make_unique<PreTokenizer>();
    for (const std::string& re : named->regexes) {
      absl::Status s = spec.pre_tokenizer->AddSplit(re, SplitBehavior::kIsolated, false);
      if (!s.ok()) {
        return absl::Status(s.code(), absl::StrCat(f.path(), ": ", pre_key, " '", pre,
                                                   "': ", std::string(s.message())));
      }
    }
    CASCADE_RETURN_IF_ERROR(spec.pre_tokenizer->AddByteLevel(false, false));
    spec.piece_style = PieceStyle::kByteLevel;
    spec.bpe.ignore_merges = named->ignore_merges;
    spec.bpe.single_byte_lookup = true;
    add_bos = named->add_bos;

    // Merges: "left right", split at the first space after the first byte.
    const std::string merges_key = absl::StrCat(kPrefix, "merges");
    if (f.Find(merges_key) == nullptr) return Invalid(f, merges_key, "missing");
    CASCADE_ASSIGN_OR_RETURN(const GgufArray* merges, OptionalArray(f, merges_key, true, 0));
    TokenMap ids;
    ids.reserve(n);
    for (size_t i = 0; i < n; ++i) ids[spec.tokens[i]] = static_cast<int32_t>(i);
    spec.merges.reserve(merges->size);
    for (size_t i = 0; i < merges->size; ++i) {
      const std::string& line = merges->strings[i];
      const size_t space = line.size() > 1 ? line.find(' ', 1) : std::string::npos;
      const std::string field = absl::StrCat(merges_key, "[", i, "]");
      if (space == std::string::npos) {
        return Invalid(f, field, absl::StrCat("'", line, "' has no space between two tokens"));
      }
      const std::string left = line.substr(0, space);
      const std::string right = line.substr(space + 1);
      auto lookup = [&](const std::string& text, int32_t* id) -> absl::Status {
        auto it = ids.find(text);
        if (it == ids.end()) {
          return Invalid(f, field,
                         absl::StrCat("'", line, "': '", text, "' is not in the vocabulary"));
        }
        *id = it->second;
        return absl::OkStatus();
      };
      MergeRule rule;
      CASCADE_RETURN_IF_ERROR(lookup(left, &rule.left));
      CASCADE_RETURN_IF_ERROR(lookup(right, &rule.right));
      CASCADE_RETURN_IF_ERROR(lookup(left + right, &rule.result));
      spec.merges.push_back(rule);
    }
  }

  CASCADE_ASSIGN_OR_RETURN(spec.add_bos,
                           f.GetBoolOr(absl::StrCat(kPrefix, "add_bos_token"), add_bos));
  CASCADE_ASSIGN_OR_RETURN(spec.add_eos,
                           f.GetBoolOr(absl::StrCat(kPrefix, "add_eos_token"), false));
  return spec;
}

}  // namespace cascade::tok
