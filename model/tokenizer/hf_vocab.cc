// Hugging Face tokenizer.json (+ tokenizer_config.json) -> VocabSpec.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/loaders.h"
#include "model/tokenizer/text_util.h"
#include "nlohmann/json.hpp"
#include "util/status_macros.h"

namespace cascade::tok {
namespace {

using Json = nlohmann::json;

constexpr int kMaxNesting = 16;  // Sequence inside Sequence ...

// Error and field helpers bound to one file.
class JsonFile {
 public:
  explicit JsonFile(const std::string& path) : path_(path) {}

  absl::Status Invalid(const std::string& field, const std::string& problem) const {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", field, ": ", problem));
  }
  absl::Status Unsupported(const std::string& field, const std::string& what) const {
    return absl::UnimplementedError(
        absl::StrCat(path_, ": ", field, ": ", what, " is not supported"));
  }
  static const char* TypeName(const Json& j) { return j.type_name(); }

  // The member `key` of object `obj`, or null when absent or JSON null.
  static const Json* Member(const Json& obj, const char* key) {
    auto it = obj.find(key);
    return (it == obj.end() || it->is_null()) ? nullptr : &*it;
  }

  absl::StatusOr<std::string> String(const Json& j, const std::string& field) const {
    if (!j.is_string()) {
      return Invalid(field, absl::StrCat("expected a string, found ", TypeName(j)));
    }
    return j.get<std::string>();
  }
  // Optional string member: `fallback` if absent.
  absl::StatusOr<std::string> StringOr(const Json& obj, const char* key, const std::string& field,
                                       const std::string& fallback) const {
    const Json* m = Member(obj, key);
    if (m == nullptr) return fallback;
    return String(*m, Join(field, key));
  }
  absl::StatusOr<bool> BoolOr(const Json& obj, const char* key, const std::string& field,
                              bool fallback) const {
    const Json* m = Member(obj, key);
    if (m == nullptr) return fallback;
    if (!m->is_boolean()) {
      return Invalid(Join(field, key),
                     absl::StrCat("expected true or false, found ", TypeName(*m)));
    }
    return m->get<bool>();
  }
  absl::StatusOr<int32_t> Id(const Json& j, const std::string& field) const {
    if (!j.is_number_integer()) {
      return Invalid(field, absl::StrCat("expected a token id, found ", TypeName(j)));
    }
    if (j.is_number_unsigned() ? j.get<uint64_t>() > static_cast<uint64_t>(INT32_MAX - 1)
                               : (j.get<int64_t>() < 0 || j.get<int64_t>() >= INT32_MAX)) {
      return Invalid(field, absl::StrCat("token id ", j.dump(), " is out of range"));
    }
    return static_cast<int32_t>(j.get<int64_t>());
  }
  absl::Status RequireObject(const Json& j, const std::string& field) const {
    if (!j.is_object()) {
      return Invalid(field, absl::StrCat("expected an object, found ", TypeName(j)));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::string> Type(const Json& j, const std::string& field) const {
    CASCADE_RETURN_IF_ERROR(RequireObject(j, field));
    const Json* t = Member(j, "type");
    if (t == nullptr) return Invalid(field, "missing \"type\"");
    return String(*t, absl::StrCat(field, ".type"));
  }
  const std::string& path() const { return path_; }
  static std::string Join(const std::string& field, const char* key) {
    return field.empty() ? std::string(key) : absl::StrCat(field, ".", key);
  }

 private:
  const std::string& path_;
};

// A split/replace pattern: {"String": s} or {"Regex": r}. Sets *is_regex.
absl::StatusOr<std::string> Pattern(const JsonFile& jf, const Json& obj, const std::string& field,
                                    bool* is_regex) {
  const Json* p = JsonFile::Member(obj, "pattern");
  if (p == nullptr) return jf.Invalid(field, "missing \"pattern\"");
  CASCADE_RETURN_IF_ERROR(jf.RequireObject(*p, field + ".pattern"));
  if (const Json* s = JsonFile::Member(*p, "String")) {
    *is_regex = false;
    return jf.String(*s, field + ".pattern.String");
  }
  if (const Json* r = JsonFile::Member(*p, "Regex")) {
    *is_regex = true;
    return jf.String(*r, field + ".pattern.Regex");
  }
  return jf.Invalid(field + ".pattern", "expected {\"String\": ...} or {\"Regex\": ...}");
}

absl::Status WithField(const absl::Status& s, const JsonFile& jf, const std::string& field) {
  if (s.ok()) return s;
  return absl::Status(s.code(),
                      absl::StrCat(jf.path(), ": ", field, ": ", std::string(s.message())));
}

absl::Status AddNormalizer(const JsonFile& jf, const Json& j, const std::string& field,
                           Normalizer* out, int depth = 0) {
  if (depth > kMaxNesting) return jf.Invalid(field, "nested too deeply");
  CASCADE_ASSIGN_OR_RETURN(const std::string type, jf.Type(j, field));
  if (type == "Sequence") {
    const Json* list = JsonFile::Member(j, "normalizers");
    if (list == nullptr || !list->is_array()) {
      return jf.Invalid(field + ".normalizers", "expected an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      CASCADE_RETURN_IF_ERROR(AddNormalizer(
          jf, (*list)[i], absl::StrCat(field, ".normalizers[", i, "]"), out, depth + 1));
    }
  } else if (type == "Prepend") {
    const Json* p = JsonFile::Member(j, "prepend");
    if (p == nullptr) return jf.Invalid(field, "missing \"prepend\"");
    CASCADE_ASSIGN_OR_RETURN(std::string prefix, jf.String(*p, field + ".prepend"));
    out->AddPrepend(std::move(prefix));
  } else if (type == "Replace") {
    bool is_regex = false;
    CASCADE_ASSIGN_OR_RETURN(const std::string pattern, Pattern(jf, j, field, &is_regex));
    const Json* c = JsonFile::Member(j, "content");
    if (c == nullptr) return jf.Invalid(field, "missing \"content\"");
    CASCADE_ASSIGN_OR_RETURN(std::string content, jf.String(*c, field + ".content"));
    CASCADE_RETURN_IF_ERROR(
        WithField(out->AddReplace(pattern, is_regex, std::move(content)), jf, field));
  } else if (type == "NFC") {
    out->AddNfc();
  } else {
    return jf.Unsupported(field, absl::StrCat("normalizer type '", type, "'"));
  }
  return absl::OkStatus();
}

absl::StatusOr<SplitBehavior> Behavior(const JsonFile& jf, const Json& j,
                                       const std::string& field) {
  CASCADE_ASSIGN_OR_RETURN(const std::string b, jf.StringOr(j, "behavior", field, "Isolated"));
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  return jf.Invalid(field + ".behavior", absl::StrCat("unknown split behavior '", b, "'"));
}

absl::Status AddPreTokenizer(const JsonFile& jf, const Json& j, const std::string& field,
                             PreTokenizer* out, int depth = 0) {
  if (depth > kMaxNesting) return jf.Invalid(field, "nested too deeply");
  CASCADE_ASSIGN_OR_RETURN(const std::string type, jf.Type(j, field));
  if (type == "Sequence") {
    const Json* list = JsonFile::Member(j, "pretokenizers");
    if (list == nullptr || !list->is_array()) {
      return jf.Invalid(field + ".pretokenizers", "expected an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      CASCADE_RETURN_IF_ERROR(AddPreTokenizer(
          jf, (*list)[i], absl::StrCat(field, ".pretokenizers[", i, "]"), out, depth + 1));
    }
    return absl::OkStatus();
  }
  if (type == "Split") {
    bool is_regex = false;
    CASCADE_ASSIGN_OR_RETURN(const std::string pattern, Pattern(jf, j, field, &is_regex));
    CASCADE_ASSIGN_OR_RETURN(const SplitBehavior behavior, Behavior(jf, j, field));
    CASCADE_ASSIGN_OR_RETURN(const bool invert, jf.BoolOr(j, "invert", field, false));
    return WithField(is_regex ? out->AddSplit(pattern, behavior, invert)
                              : out->AddLiteralSplit(pattern, behavior, invert),
                     jf, field);
  }
  if (type == "ByteLevel") {
    CASCADE_ASSIGN_OR_RETURN(const bool prefix, jf.BoolOr(j, "add_prefix_space", field, true));
    CASCADE_ASSIGN_OR_RETURN(const bool use_regex, jf.BoolOr(j, "use_regex", field, true));
    return WithField(out->AddByteLevel(prefix, use_regex), jf, field);
  }
  if (type == "Metaspace") {
    CASCADE_ASSIGN_OR_RETURN(const std::string replacement,
                             jf.StringOr(j, "replacement", field, "\xE2\x96\x81"));
    if (replacement.empty()) return jf.Invalid(field + ".replacement", "is empty");
    PrependScheme scheme = PrependScheme::kAlways;
    if (JsonFile::Member(j, "prepend_scheme") != nullptr) {
      CASCADE_ASSIGN_OR_RETURN(const std::string s,
                               jf.StringOr(j, "prepend_scheme", field, "always"));
      if (s == "always") {
        scheme = PrependScheme::kAlways;
      } else if (s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (s == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return jf.Invalid(field + ".prepend_scheme", absl::StrCat("unknown scheme '", s, "'"));
      }
    } else {
      CASCADE_ASSIGN_OR_RETURN(const bool prefix, jf.BoolOr(j, "add_prefix_space", field, true));
      scheme = prefix ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    CASCADE_ASSIGN_OR_RETURN(const bool split, jf.BoolOr(j, "split", field, true));
    out->AddMetaspace(replacement, scheme, split);
    return absl::OkStatus();
  }
  if (type == "Digits") {
    CASCADE_ASSIGN_OR_RETURN(const bool single, jf.BoolOr(j, "individual_digits", field, false));
    return WithField(
        out->AddSplit(single ? R"(\p{N})" : R"(\p{N}+)", SplitBehavior::kIsolated, false), jf,
        field);
  }
  if (type == "Whitespace") {
    return WithField(out->AddSplit(R"(\w+|[^\w\s]+)", SplitBehavior::kRemoved, true), jf, field);
  }
  if (type == "WhitespaceSplit") {
    return WithField(out->AddSplit(R"(\s+)", SplitBehavior::kRemoved, false), jf, field);
  }
  if (type == "Punctuation") {
    CASCADE_ASSIGN_OR_RETURN(const SplitBehavior behavior, Behavior(jf, j, field));
    return WithField(out->AddSplit(R"([\p{P}!-/:-@\[-`{-~])", behavior, false), jf, field);
  }
  return jf.Unsupported(field, absl::StrCat("pre_tokenizer type '", type, "'"));
}

// Reads a token spelled as a string or as {"content": ...} (tokenizer_config.json).
absl::StatusOr<std::string> TokenContent(const JsonFile& jf, const Json& j,
                                         const std::string& field) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object()) {
    const Json* c = JsonFile::Member(j, "content");
    if (c != nullptr) return jf.String(*c, field + ".content");
  }
  return jf.Invalid(field, absl::StrCat("expected a token string or {\"content\": ...}, found ",
                                        JsonFile::TypeName(j)));
}

struct PostProcessing {
  int32_t bos = -1;
  int32_t eos = -1;
};

absl::Status ReadPostProcessor(const JsonFile& jf, const Json& j, const std::string& field,
                               PostProcessing* out, int depth = 0) {
  if (depth > kMaxNesting) return jf.Invalid(field, "nested too deeply");
  CASCADE_ASSIGN_OR_RETURN(const std::string type, jf.Type(j, field));
  if (type == "Sequence") {
    const Json* list = JsonFile::Member(j, "processors");
    if (list == nullptr || !list->is_array()) {
      return jf.Invalid(field + ".processors", "expected an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      CASCADE_RETURN_IF_ERROR(ReadPostProcessor(
          jf, (*list)[i], absl::StrCat(field, ".processors[", i, "]"), out, depth + 1));
    }
  } else if (type == "TemplateProcessing") {
    const Json* single = JsonFile::Member(j, "single");
    if (single == nullptr || !single->is_array()) {
      return jf.Invalid(field + ".single", "expected an array");
    }
    const Json* specials = JsonFile::Member(j, "special_tokens");
    bool seen_sequence = false;
    for (size_t i = 0; i < single->size(); ++i) {
      const std::string item_field = absl::StrCat(field, ".single[", i, "]");
      const Json& item = (*single)[i];
      CASCADE_RETURN_IF_ERROR(jf.RequireObject(item, item_field));
      if (JsonFile::Member(item, "Sequence") != nullptr) {
        seen_sequence = true;
        continue;
      }
      const Json* st = JsonFile::Member(item, "SpecialToken");
      if (st == nullptr) return jf.Invalid(item_field, "expected Sequence or SpecialToken");
      CASCADE_RETURN_IF_ERROR(jf.RequireObject(*st, item_field + ".SpecialToken"));
      const Json* name = JsonFile::Member(*st, "id");
      if (name == nullptr) return jf.Invalid(item_field + ".SpecialToken", "missing \"id\"");
      CASCADE_ASSIGN_OR_RETURN(const std::string key,
                               jf.String(*name, item_field + ".SpecialToken.id"));
      const Json* entry = specials != nullptr && specials->is_object()
                              ? JsonFile::Member(*specials, key.c_str())
                              : nullptr;
      const Json* ids =
          entry != nullptr && entry->is_object() ? JsonFile::Member(*entry, "ids") : nullptr;
      if (ids == nullptr || !ids->is_array() || ids->size() != 1) {
        return jf.Invalid(field + ".special_tokens",
                          absl::StrCat("'", key, "' needs an entry with exactly one id"));
      }
      CASCADE_ASSIGN_OR_RETURN(
          const int32_t id,
          jf.Id((*ids)[0], absl::StrCat(field, ".special_tokens.", key, ".ids[0]")));
      if (!seen_sequence && out->bos < 0) out->bos = id;
      if (seen_sequence) out->eos = id;
    }
  } else if (type == "RobertaProcessing" || type == "BertProcessing") {
    for (const char* key : {"cls", "sep"}) {
      const Json* pair = JsonFile::Member(j, key);
      if (pair == nullptr || !pair->is_array() || pair->size() != 2) {
        return jf.Invalid(absl::StrCat(field, ".", key), "expected [token, id]");
      }
      CASCADE_ASSIGN_OR_RETURN(const int32_t id,
                               jf.Id((*pair)[1], absl::StrCat(field, ".", key, "[1]")));
      (std::string(key) == "cls" ? out->bos : out->eos) = id;
    }
  }
  // ByteLevel and others add no tokens.
  return absl::OkStatus();
}

struct Decoding {
  PieceStyle style = PieceStyle::kRaw;
  bool strip_leading_space = false;
};

absl::Status ReadDecoder(const JsonFile& jf, const Json& j, const std::string& field, Decoding* out,
                         int depth = 0) {
  if (depth > kMaxNesting) return jf.Invalid(field, "nested too deeply");
  CASCADE_ASSIGN_OR_RETURN(const std::string type, jf.Type(j, field));
  if (type == "Sequence") {
    const Json* list = JsonFile::Member(j, "decoders");
    if (list == nullptr || !list->is_array()) {
      return jf.Invalid(field + ".decoders", "expected an array");
    }
    for (size_t i = 0; i < list->size(); ++i) {
      CASCADE_RETURN_IF_ERROR(
          ReadDecoder(jf, (*list)[i], absl::StrCat(field, ".decoders[", i, "]"), out, depth + 1));
    }
  } else if (type == "ByteLevel") {
    out->style = PieceStyle::kByteLevel;
  } else if (type == "Metaspace") {
    out->style = PieceStyle::kSentencePiece;
    CASCADE_ASSIGN_OR_RETURN(const std::string scheme,
                             jf.StringOr(j, "prepend_scheme", field, "always"));
    CASCADE_ASSIGN_OR_RETURN(const bool prefix, jf.BoolOr(j, "add_prefix_space", field, true));
    out->strip_leading_space = scheme != "never" && prefix;
  } else if (type == "Replace") {
    bool is_regex = false;
    CASCADE_ASSIGN_OR_RETURN(const std::string pattern, Pattern(jf, j, field, &is_regex));
    if (!is_regex && pattern == "\xE2\x96\x81") out->style = PieceStyle::kSentencePiece;
  } else if (type == "Strip") {
    CASCADE_ASSIGN_OR_RETURN(const std::string content, jf.StringOr(j, "content", field, " "));
    const Json* start = JsonFile::Member(j, "start");
    if (content == " " && start != nullptr && start->is_number_integer() &&
        start->get<int64_t>() > 0) {
      out->strip_leading_space = true;
    }
  }
  // ByteFallback and Fuse need nothing here: byte tokens decode to their byte anyway.
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<VocabSpec> LoadHfVocab(const std::string& tokenizer_path,
                                      const std::string& tokenizer_json,
                                      const std::string& config_path,
                                      const std::string& config_json) {
  const JsonFile jf(tokenizer_path);
  const Json root = Json::parse(tokenizer_json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return jf.Invalid("(file)", "not valid JSON");
  CASCADE_RETURN_IF_ERROR(jf.RequireObject(root, "(file)"));

  VocabSpec spec;
  spec.source = tokenizer_path;
  spec.describe = "bpe:tokenizer.json";
  spec.model = VocabSpec::Model::kBpe;
  spec.later_merge_wins = true;

  // --- model
  const Json* model = JsonFile::Member(root, "model");
  if (model == nullptr) return jf.Invalid("model", "missing");
  CASCADE_RETURN_IF_ERROR(jf.RequireObject(*model, "model"));
  CASCADE_ASSIGN_OR_RETURN(const std::string model_type,
                           jf.StringOr(*model, "type", "model", "BPE"));
  if (model_type != "BPE") {
    return jf.Unsupported("model.type", absl::StrCat("model type '", model_type, "'"));
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    CASCADE_ASSIGN_OR_RETURN(const std::string v, jf.StringOr(*model, key, "model", ""));
    if (!v.empty()) return jf.Unsupported(absl::StrCat("model.", key), "a non-empty affix");
  }
  const Json* vocab = JsonFile::Member(*model, "vocab");
  if (vocab == nullptr || !vocab->is_object()) {
    return jf.Invalid("model.vocab", "expected an object mapping token text to id");
  }
  TokenMap model_vocab;
  model_vocab.reserve(vocab->size());
  std::vector<std::pair<int32_t, std::string>> by_id;
  by_id.reserve(vocab->size());
  int32_t max_id = -1;
  for (auto it = vocab->begin(); it != vocab->end(); ++it) {
    CASCADE_ASSIGN_OR_RETURN(const int32_t id,
                             jf.Id(it.value(), absl::StrCat("model.vocab[\"", it.key(), "\"]")));
    model_vocab[it.key()] = id;
    by_id.emplace_back(id, it.key());
    max_id = std::max(max_id, id);
  }

  // --- added tokens
  const Json* added = JsonFile::Member(root, "added_tokens");
  if (added != nullptr && !added->is_array()) {
    return jf.Invalid("added_tokens", "expected an array");
  }
  if (added != nullptr) {
    for (size_t i = 0; i < added->size(); ++i) {
      const std::string field = absl::StrCat("added_tokens[", i, "]");
      const Json& a = (*added)[i];
      CASCADE_RETURN_IF_ERROR(jf.RequireObject(a, field));
      AddedTokenSpec t;
      const Json* id = JsonFile::Member(a, "id");
      if (id == nullptr) return jf.Invalid(field, "missing \"id\"");
      CASCADE_ASSIGN_OR_RETURN(t.id, jf.Id(*id, field + ".id"));
      const Json* content = JsonFile::Member(a, "content");
      if (content == nullptr) return jf.Invalid(field, "missing \"content\"");
      CASCADE_ASSIGN_OR_RETURN(t.content, jf.String(*content, field + ".content"));
      if (t.content.empty()) return jf.Invalid(field + ".content", "is empty");
      CASCADE_ASSIGN_OR_RETURN(t.special, jf.BoolOr(a, "special", field, false));
      CASCADE_ASSIGN_OR_RETURN(t.lstrip, jf.BoolOr(a, "lstrip", field, false));
      CASCADE_ASSIGN_OR_RETURN(t.rstrip, jf.BoolOr(a, "rstrip", field, false));
      CASCADE_ASSIGN_OR_RETURN(t.single_word, jf.BoolOr(a, "single_word", field, false));
      CASCADE_ASSIGN_OR_RETURN(t.normalized, jf.BoolOr(a, "normalized", field, !t.special));
      max_id = std::max(max_id, t.id);
      spec.added_tokens.push_back(std::move(t));
    }
  }
  if (max_id < 0) return jf.Invalid("model.vocab", "is empty");
  const size_t entries = vocab->size() + (added == nullptr ? 0 : added->size());
  if (static_cast<size_t>(max_id) >= 2 * entries + 1024) {
    return jf.Invalid("model.vocab",
                      absl::StrCat("token id ", max_id, " leaves most of the ", max_id + 1,
                                   " ids unused (", entries, " tokens)"));
  }

  // --- token table
  const size_t n = static_cast<size_t>(max_id) + 1;
  spec.tokens.assign(n, "");
  spec.kinds.assign(n, TokenKind::kUnused);
  for (const auto& [id, text] : by_id) {
    if (spec.kinds[id] != TokenKind::kUnused) {
      return jf.Invalid(absl::StrCat("model.vocab[\"", text, "\"]"),
                        absl::StrCat("id ", id, " is also used by '", spec.tokens[id], "'"));
    }
    spec.tokens[id] = text;
    spec.kinds[id] = TokenKind::kNormal;
  }
  CASCADE_ASSIGN_OR_RETURN(spec.bpe.byte_fallback,
                           jf.BoolOr(*model, "byte_fallback", "model", false));
  CASCADE_ASSIGN_OR_RETURN(spec.bpe.ignore_merges,
                           jf.BoolOr(*model, "ignore_merges", "model", false));
  CASCADE_ASSIGN_OR_RETURN(spec.bpe.fuse_unk, jf.BoolOr(*model, "fuse_unk", "model", false));
  if (spec.bpe.byte_fallback) {
    for (size_t i = 0; i < n; ++i) {
      if (spec.kinds[i] == TokenKind::kNormal && ParseByteToken(spec.tokens[i]) >= 0) {
        spec.kinds[i] = TokenKind::kByte;
      }
    }
  }
  CASCADE_ASSIGN_OR_RETURN(const std::string unk, jf.StringOr(*model, "unk_token", "model", ""));
  if (!unk.empty()) {
    auto it = model_vocab.find(unk);
    if (it == model_vocab.end()) {
      return jf.Invalid("model.unk_token", absl::StrCat("'", unk, "' is not in model.vocab"));
    }
    spec.unk_id = spec.bpe.unk_id = it->second;
    spec.kinds[it->second] = TokenKind::kUnknown;
  }
  for (const AddedTokenSpec& t : spec.added_tokens) {
    spec.tokens[t.id] = t.content;
    if (t.id != spec.unk_id) {
      spec.kinds[t.id] = t.special ? TokenKind::kControl : TokenKind::kUserDefined;
    }
  }

  // --- merges
  const Json* merges = JsonFile::Member(*model, "merges");
  if (merges != nullptr && !merges->is_array()) {
    return jf.Invalid("model.merges", "expected an array");
  }
  if (merges != nullptr) {
    spec.merges.reserve(merges->size());
    for (size_t i = 0; i < merges->size(); ++i) {
      const std::string field = absl::StrCat("model.merges[", i, "]");
      const Json& m = (*merges)[i];
      std::string left, right;
      if (m.is_string()) {
        const std::string line = m.get<std::string>();
        if (i == 0 && line.rfind("#version", 0) == 0) continue;
        const size_t space = line.find(' ');
        if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
          return jf.Invalid(field,
                            absl::StrCat("'", line, "' is not two tokens separated by one space"));
        }
        left = line.substr(0, space);
        right = line.substr(space + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        left = m[0].get<std::string>();
        right = m[1].get<std::string>();
      } else {
        return jf.Invalid(field, absl::StrCat("expected \"left right\" or [left, right], found ",
                                              m.dump().substr(0, 80)));
      }
      MergeRule rule;
      for (const auto& [text, dest] :
           {std::make_pair(&left, &rule.left), std::make_pair(&right, &rule.right)}) {
        auto it = model_vocab.find(*text);
        if (it == model_vocab.end()) {
          return jf.Invalid(field, absl::StrCat("'", *text, "' is not in model.vocab"));
        }
        *dest = it->second;
      }
      auto it = model_vocab.find(left + right);
      if (it == model_vocab.end()) {
        return jf.Invalid(
            field, absl::StrCat("the merged token '", left, right, "' is not in model.vocab"));
      }
      rule.result = it->second;
      spec.merges.push_back(rule);
    }
  }
  spec.model_vocab = std::move(model_vocab);

  // --- normalizer and pre-tokenizer
  if (const Json* norm = JsonFile::Member(root, "normalizer")) {
    spec.normalizer = std::make_unique<Normalizer>();
    CASCADE_RETURN_IF_ERROR(AddNormalizer(jf, *norm, "normalizer", spec.normalizer.get()));
  }
  if (const Json* pre = JsonFile::Member(root, "pre_tokenizer")) {
    spec.pre_tokenizer = std::make_unique<PreTokenizer>();
    CASCADE_RETURN_IF_ERROR(AddPreTokenizer(jf, *pre, "pre_tokenizer", spec.pre_tokenizer.get()));
  }

  // --- decoding
  Decoding decoding;
  if (const Json* dec = JsonFile::Member(root, "decoder")) {
    CASCADE_RETURN_IF_ERROR(ReadDecoder(jf, *dec, "decoder", &decoding));
  } else if (spec.pre_tokenizer != nullptr && spec.pre_tokenizer->byte_level()) {
    decoding.style = PieceStyle::kByteLevel;
  }
  spec.piece_style = decoding.style;
  spec.strip_leading_space = decoding.strip_leading_space;

  // --- BOS/EOS: post_processor, then tokenizer_config.json
  PostProcessing post;
  if (const Json* pp = JsonFile::Member(root, "post_processor")) {
    CASCADE_RETURN_IF_ERROR(ReadPostProcessor(jf, *pp, "post_processor", &post));
  }
  for (int32_t id : {post.bos, post.eos}) {
    if (id >= static_cast<int32_t>(n)) {
      return jf.Invalid("post_processor",
                        absl::StrCat("token id ", id, " is out of range (", n, " tokens)"));
    }
  }
  spec.bos_id = post.bos;
  spec.eos_id = post.eos;
  spec.add_bos = post.bos >= 0;
  spec.add_eos = post.eos >= 0;

  if (!config_json.empty()) {
    const JsonFile cf(config_path);
    const Json config = Json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) return cf.Invalid("(file)", "not valid JSON");
    CASCADE_RETURN_IF_ERROR(cf.RequireObject(config, "(file)"));
    auto find_id = [&](const std::string& text) -> int32_t {
      for (const AddedTokenSpec& t : spec.added_tokens) {
        if (t.content == text) return t.id;
      }
      auto it = spec.model_vocab->find(text);
      return it == spec.model_vocab->end() ? -1 : it->second;
    };
    for (const auto& [key, dest] :
         {std::make_pair("bos_token", &spec.bos_id), std::make_pair("eos_token", &spec.eos_id)}) {
      const Json* v = JsonFile::Member(config, key);
      if (v == nullptr) continue;
      CASCADE_ASSIGN_OR_RETURN(const std::string text, TokenContent(cf, *v, key));
      const int32_t id = find_id(text);
      if (id < 0) {
        return cf.Invalid(key, absl::StrCat("'", text, "' is not a token of ", tokenizer_path));
      }
      *dest = id;
    }
    CASCADE_ASSIGN_OR_RETURN(spec.add_bos, cf.BoolOr(config, "add_bos_token", "", spec.add_bos));
    CASCADE_ASSIGN_OR_RETURN(spec.add_eos, cf.BoolOr(config, "add_eos_token", "", spec.add_eos));
  }
  return spec;
}

}  // namespace cascade::tok
