#include "model/tokenizer/added_tokens.h"

#include <algorithm>

#include "model/tokenizer/text_util.h"
#include "util/utf8.h"

namespace cascade::tok {
namespace {

// Oniguruma's \w for one code point, approximated without tables: ASCII word characters,
// and every non-ASCII code point that is not white space or general punctuation.
bool IsWordChar(int32_t cp) {
  if (cp < 0) return false;
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  if (IsWhiteSpace(cp)) return false;
  if (cp >= 0x2000 && cp <= 0x206f) return false;  // General Punctuation
  if (cp >= 0x3000 && cp <= 0x303f) return false;  // CJK Symbols and Punctuation
  if (cp >= 0xa0 && cp <= 0xbf) return false;      // Latin-1 punctuation and symbols
  return true;
}

// The code point that ends at `end` (exclusive), or -1.
int32_t LastCodePoint(std::string_view text, size_t end) {
  if (end == 0) return -1;
  size_t start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<uint8_t>(text[start]) & 0xc0) == 0x80) {
    --start;
  }
  int len;
  const int32_t cp = DecodeUtf8(text, start, &len);
  return start + len == end ? cp : -1;
}

}  // namespace

void AddedTokenMatcher::Add(const AddedTokenSpec& token) {
  if (token.content.empty() || !contents_.insert(token.content).second) return;
  tokens_.push_back(
      Entry{token.content, token.id, token.special, token.lstrip, token.rstrip, token.single_word});
  auto& bucket = by_first_byte_[static_cast<uint8_t>(token.content[0])];
  // Keep each bucket sorted longest first (insertion after the last entry at least as long).
  const size_t len = token.content.size();
  auto at = std::partition_point(bucket.begin(), bucket.end(),
                                 [&](uint32_t i) { return tokens_[i].content.size() >= len; });
  bucket.insert(at, static_cast<uint32_t>(tokens_.size() - 1));
}

void AddedTokenMatcher::Split(std::string_view text, bool parse_special,
                              std::vector<Fragment>* out) const {
  size_t text_start = 0;  // start of the pending plain-text fragment
  size_t pos = 0;
  while (pos < text.size()) {
    const Entry* hit = nullptr;
    for (uint32_t idx : by_first_byte_[static_cast<uint8_t>(text[pos])]) {
      const Entry& e = tokens_[idx];
      if (e.special && !parse_special) continue;
      if (text.compare(pos, e.content.size(), e.content) != 0) continue;
      if (e.single_word) {
        const size_t end = pos + e.content.size();
        int len;
        const int32_t next = end < text.size() ? DecodeUtf8(text, end, &len) : -1;
        if (IsWordChar(LastCodePoint(text, pos)) || IsWordChar(next)) continue;
      }
      hit = &e;
      break;
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t begin = pos;
    size_t end = pos + hit->content.size();
    if (hit->lstrip) {
      while (begin > text_start) {
        const int32_t cp = LastCodePoint(text, begin);
        if (!IsWhiteSpace(cp)) break;
        begin -= cp < 0x80 ? 1 : (cp < 0x800 ? 2 : (cp < 0x10000 ? 3 : 4));
      }
    }
    if (hit->rstrip) {
      while (end < text.size()) {
        int len;
        const int32_t cp = DecodeUtf8(text, end, &len);
        if (!IsWhiteSpace(cp)) break;
        end += len;
      }
    }
    if (begin > text_start) out->push_back(Fragment{text_start, begin, -1});
    out->push_back(Fragment{begin, end, hit->id});
    pos = end;
    text_start = end;
  }
  if (text_start < text.size()) out->push_back(Fragment{text_start, text.size(), -1});
}

}  // namespace cascade::tok
