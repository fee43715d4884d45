#include "model/tokenizer/pipeline.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "model/tokenizer/text_util.h"
#include "util/status_macros.h"
#include "util/utf8.h"

namespace cascade::tok {
namespace {

constexpr std::string_view kEndOfGenerationNames[] = {
    "<|eot_id|>",    "<|eom_id|>", "<|im_end|>", "<|end|>",         "<end_of_turn>",
    "<|endoftext|>", "<|EOT|>",    "<EOT>",      "<|end_of_text|>", "<｜end▁of▁sentence｜>",
};

bool MergesAway(TokenKind kind) {
  return kind == TokenKind::kNormal || kind == TokenKind::kUserDefined ||
         kind == TokenKind::kUnused || kind == TokenKind::kUndefined;
}

std::string DecodePiece(const std::string& text, TokenKind kind, PieceStyle style) {
  switch (kind) {
    case TokenKind::kControl:
    case TokenKind::kUnknown:
    case TokenKind::kUserDefined:
      return text;
    case TokenKind::kUnused:
      return "";
    case TokenKind::kByte: {
      const int b = ParseByteToken(text);
      return b < 0 ? text : std::string(1, static_cast<char>(b));
    }
    case TokenKind::kNormal:
    case TokenKind::kUndefined:
      break;
  }
  switch (style) {
    case PieceStyle::kSentencePiece: {
      std::string out;
      out.reserve(text.size());
      for (size_t i = 0; i < text.size(); ++i) {
        if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
          out.push_back(' ');
          i += 2;
        } else {
          out.push_back(text[i]);
        }
      }
      return out;
    }
    case PieceStyle::kByteLevel: {
      std::string out;
      return ByteLevelDecode(text, &out) ? out : text;
    }
    case PieceStyle::kRaw:
      break;
  }
  return text;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> PipelineTokenizer::Create(VocabSpec spec) {
  const std::string& src = spec.source;
  const size_t n = spec.tokens.size();
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat(src, ": the vocabulary is empty"));
  if (n > static_cast<size_t>(INT32_MAX) || spec.kinds.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": ", n, " tokens but ", spec.kinds.size(), " token kinds"));
  }
  auto check = [&](int32_t id, std::string_view what) -> absl::Status {
    if (id < -1 || id >= static_cast<int64_t>(n)) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": ", std::string(what), " id ", id,
                                                     " is out of range (vocabulary size ", n, ")"));
    }
    return absl::OkStatus();
  };
  CASCADE_RETURN_IF_ERROR(check(spec.bos_id, "BOS"));
  CASCADE_RETURN_IF_ERROR(check(spec.eos_id, "EOS"));
  CASCADE_RETURN_IF_ERROR(check(spec.unk_id, "unknown-token"));
  CASCADE_RETURN_IF_ERROR(check(spec.bpe.unk_id, "unknown-token"));
  for (int32_t id : spec.eog_ids) CASCADE_RETURN_IF_ERROR(check(id, "end-of-generation"));
  for (const AddedTokenSpec& t : spec.added_tokens) {
    if (t.id < 0) return check(-2, "added token");
    CASCADE_RETURN_IF_ERROR(check(t.id, "added token"));
  }
  for (const MergeRule& m : spec.merges) {
    if (m.left < 0 || m.right < 0 || m.result < 0) {
      return absl::InvalidArgumentError(absl::StrCat(src, ": merge rule with a missing token"));
    }
    CASCADE_RETURN_IF_ERROR(check(m.left, "merge"));
    CASCADE_RETURN_IF_ERROR(check(m.right, "merge"));
    CASCADE_RETURN_IF_ERROR(check(m.result, "merge"));
  }
  if (spec.model_vocab.has_value()) {
    for (const auto& [text, id] : *spec.model_vocab) {
      CASCADE_RETURN_IF_ERROR(check(id < 0 ? -2 : id, "vocabulary"));
    }
  }
  if (!spec.scores.empty() && spec.scores.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat(src, ": ", spec.scores.size(), " scores for ", n, " tokens"));
  }

  std::unique_ptr<PipelineTokenizer> tok(new PipelineTokenizer());
  tok->describe_ = spec.describe;

  // Text -> id over every token (later duplicates win, as in llama.cpp).
  TokenMap all;
  all.reserve(n);
  for (size_t i = 0; i < n; ++i) all[spec.tokens[i]] = static_cast<int32_t>(i);
  std::array<int32_t, 256> byte_ids;
  for (int b = 0; b < 256; ++b) {
    auto it = all.find(ByteTokenName(static_cast<uint8_t>(b)));
    byte_ids[b] = it == all.end() ? -1 : it->second;
  }

  if (spec.model == VocabSpec::Model::kSpm) {
    TokenMap pieces;
    if (spec.model_vocab.has_value()) {
      pieces = std::move(*spec.model_vocab);
    } else {
      pieces.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        if (MergesAway(spec.kinds[i])) pieces[spec.tokens[i]] = static_cast<int32_t>(i);
      }
    }
    std::vector<float> scores = std::move(spec.scores);
    scores.resize(n, 0.0f);
    std::vector<bool> unused(n);
    for (size_t i = 0; i < n; ++i) unused[i] = spec.kinds[i] == TokenKind::kUnused;
    tok->spm_ = std::make_unique<SpmModel>(std::move(pieces), std::move(scores), std::move(unused),
                                           byte_ids, spec.unk_id);
  } else {
    TokenMap vocab = spec.model_vocab.has_value() ? std::move(*spec.model_vocab) : all;
    tok->bpe_ = std::make_unique<BpeModel>(std::move(vocab), spec.merges, spec.later_merge_wins,
                                           byte_ids, spec.bpe);
  }

  tok->normalizer_ = std::move(spec.normalizer);
  tok->pre_tokenizer_ = std::move(spec.pre_tokenizer);
  for (AddedTokenSpec& t : spec.added_tokens) {
    if (t.normalized && tok->normalizer_ != nullptr) {
      auto norm = tok->normalizer_->Run(t.content);
      if (norm.ok()) t.content = std::move(*norm);
      tok->normalized_tokens_.Add(t);
    } else {
      tok->raw_tokens_.Add(t);
    }
  }

  tok->pieces_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    tok->pieces_.push_back(DecodePiece(spec.tokens[i], spec.kinds[i], spec.piece_style));
  }

  tok->eog_ids_ = spec.eog_ids;
  if (spec.eos_id >= 0) tok->eog_ids_.push_back(spec.eos_id);
  for (std::string_view name : kEndOfGenerationNames) {
    auto it = all.find(absl::string_view(name.data(), name.size()));
    if (it == all.end()) continue;
    const TokenKind kind = spec.kinds[it->second];
    if (kind == TokenKind::kControl || kind == TokenKind::kUserDefined) {
      tok->eog_ids_.push_back(it->second);
    }
  }
  std::sort(tok->eog_ids_.begin(), tok->eog_ids_.end());
  tok->eog_ids_.erase(std::unique(tok->eog_ids_.begin(), tok->eog_ids_.end()), tok->eog_ids_.end());

  tok->tokens_ = std::move(spec.tokens);
  tok->kinds_ = std::move(spec.kinds);
  tok->bos_id_ = spec.bos_id;
  tok->eos_id_ = spec.eos_id;
  tok->add_bos_ = spec.add_bos && spec.bos_id >= 0;
  tok->add_eos_ = spec.add_eos && spec.eos_id >= 0;
  tok->strip_leading_space_ = spec.strip_leading_space;
  return std::unique_ptr<Tokenizer>(std::move(tok));
}

absl::Status PipelineTokenizer::EncodeChunk(std::string_view text, bool at_start,
                                            std::vector<int32_t>* out) const {
  std::vector<PreToken> pieces;
  if (pre_tokenizer_ != nullptr) {
    CASCADE_RETURN_IF_ERROR(pre_tokenizer_->Run(std::string(text), at_start, &pieces));
  } else if (!text.empty()) {
    pieces.push_back(PreToken{std::string(text), at_start});
  }
  for (const PreToken& p : pieces) {
    if (spm_ != nullptr) {
      CASCADE_RETURN_IF_ERROR(spm_->Encode(p.text, out));
    } else {
      CASCADE_RETURN_IF_ERROR(bpe_->Encode(p.text, out));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> PipelineTokenizer::Encode(std::string_view text,
                                                               bool add_special,
                                                               bool parse_special) const {
  if (!IsValidUtf8(text)) {
    size_t pos = 0;
    int len = 1;
    while (pos < text.size() && DecodeUtf8(text, pos, &len) >= 0) pos += len;
    return absl::InvalidArgumentError(
        absl::StrCat("text to encode is not valid UTF-8 (at byte ", pos, ")"));
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 2);
  if (add_special && add_bos_) ids.push_back(bos_id_);

  std::vector<Fragment> fragments;
  raw_tokens_.Split(text, parse_special, &fragments);
  std::vector<Fragment> sub;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      ids.push_back(f.token);
      continue;
    }
    const std::string_view raw = text.substr(f.begin, f.end - f.begin);
    std::string normalized;
    if (normalizer_ != nullptr) {
      CASCADE_ASSIGN_OR_RETURN(normalized, normalizer_->Run(raw));
    } else {
      normalized = std::string(raw);
    }
    if (normalized_tokens_.empty()) {
      CASCADE_RETURN_IF_ERROR(EncodeChunk(normalized, f.begin == 0, &ids));
      continue;
    }
    sub.clear();
    normalized_tokens_.Split(normalized, parse_special, &sub);
    for (const Fragment& s : sub) {
      if (s.token >= 0) {
        ids.push_back(s.token);
      } else {
        CASCADE_RETURN_IF_ERROR(
            EncodeChunk(std::string_view(normalized).substr(s.begin, s.end - s.begin),
                        f.begin == 0 && s.begin == 0, &ids));
      }
    }
  }
  if (add_special && add_eos_) ids.push_back(eos_id_);
  return ids;
}

std::string PipelineTokenizer::TokenToPiece(int32_t id, bool render_special) const {
  if (!IsValid(id)) return "";
  const TokenKind kind = kinds_[id];
  if (!render_special && (kind == TokenKind::kControl || kind == TokenKind::kUnknown)) return "";
  return pieces_[id];
}

}  // namespace cascade::tok
