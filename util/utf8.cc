#include "util/utf8.h"

namespace cascade {

int Utf8SequenceLength(uint8_t lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xe0) == 0xc0) return 2;
  if ((lead & 0xf0) == 0xe0) return 3;
  if ((lead & 0xf8) == 0xf0) return 4;
  return 1;
}

int32_t DecodeUtf8(std::string_view text, size_t pos, int* len) {
  *len = 1;
  if (pos >= text.size()) return -1;
  const uint8_t b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) return b0;
  int n = Utf8SequenceLength(b0);
  if (n == 1 || pos + n > text.size()) return -1;
  int32_t cp = b0 & (0x7f >> n);
  for (int i = 1; i < n; ++i) {
    const uint8_t b = static_cast<uint8_t>(text[pos + i]);
    if ((b & 0xc0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3f);
  }
  // reject overlong forms, surrogates and out-of-range values
  static constexpr int32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return -1;
  *len = n;
  return cp;
}

void AppendUtf8(int32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xc0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xe0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  } else {
    out->push_back(static_cast<char>(0xf0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3f)));
  }
}

size_t IncompleteUtf8Suffix(std::string_view text) {
  // Look back at most 3 bytes for a lead byte whose sequence runs past the end.
  const size_t n = text.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const uint8_t b = static_cast<uint8_t>(text[n - back]);
    if ((b & 0xc0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const int need = Utf8SequenceLength(b);
    return need > static_cast<int>(back) ? back : 0;
  }
  return 0;
}

std::vector<std::string> SplitUtf8(std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < text.size()) {
    int len;
    DecodeUtf8(text, pos, &len);
    out.emplace_back(text.substr(pos, len));
    pos += len;
  }
  return out;
}

bool IsValidUtf8(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    int len;
    if (DecodeUtf8(text, pos, &len) < 0) return false;
    pos += len;
  }
  return true;
}

}  // namespace cascade
