#include "model/tokenizer/text_util.h"

#include "util/utf8.h"

namespace cascade::tok {
namespace {

struct ByteTables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 512> to_byte;  // every mapped code point is below U+0200

  ByteTables() {
    to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
      const int32_t cp = printable ? b : 256 + next++;
      AppendUtf8(cp, &to_unicode[b]);
      to_byte[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteTables& Tables() {
  static const ByteTables* const tables = new ByteTables();
  return *tables;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

const std::string& ByteToUnicode(uint8_t b) { return Tables().to_unicode[b]; }

int UnicodeToByte(int32_t cp) {
  if (cp < 0 || cp >= 512) return -1;
  return Tables().to_byte[cp];
}

std::string ByteLevelEncode(std::string_view bytes) {
  const ByteTables& t = Tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += t.to_unicode[static_cast<uint8_t>(c)];
  return out;
}

bool ByteLevelDecode(std::string_view text, std::string* out) {
  size_t pos = 0;
  while (pos < text.size()) {
    int len;
    const int32_t cp = DecodeUtf8(text, pos, &len);
    const int b = UnicodeToByte(cp);
    if (b < 0) return false;
    out->push_back(static_cast<char>(b));
    pos += len;
  }
  return true;
}

std::string ByteTokenName(uint8_t b) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return std::string{'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
}

int ParseByteToken(std::string_view text) {
  if (text.size() != 6 || text[0] != '<' || text[1] != '0' || text[2] != 'x' || text[5] != '>') {
    return -1;
  }
  const int hi = HexValue(text[3]);
  const int lo = HexValue(text[4]);
  if (hi < 0 || lo < 0) return -1;
  return hi * 16 + lo;
}

bool IsWhiteSpace(int32_t cp) {
  if (cp <= 0x20) return cp == 0x20 || (cp >= 0x09 && cp <= 0x0d);
  switch (cp) {
    case 0x85:
    case 0xa0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202f:
    case 0x205f:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200a;
  }
}

std::string SanitizeUtf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t pos = 0;
  while (pos < bytes.size()) {
    int len;
    if (DecodeUtf8(bytes, pos, &len) < 0) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(bytes.data() + pos, len);
    }
    pos += len;
  }
  return out;
}

}  // namespace cascade::tok
