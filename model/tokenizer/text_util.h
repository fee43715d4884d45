// Small text helpers shared by the tokenizer pieces: the GPT-2 byte-to-character table,
// byte-token names (<0xHH>), Unicode white space and U+FFFD repair of UTF-8.
//
// Contract: pure functions and immutable static tables (built on first use, thread-safe);
// nothing here fails or allocates beyond its return value.
#ifndef CASCADE_MODEL_TOKENIZER_TEXT_UTIL_H_
#define CASCADE_MODEL_TOKENIZER_TEXT_UTIL_H_

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace cascade::tok {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes
// to U+0100.. in byte order. Returns the UTF-8 spelling of the character for `b`.
const std::string& ByteToUnicode(uint8_t b);
// Inverse of ByteToUnicode for one code point: the byte, or -1 if `cp` is not in the table.
int UnicodeToByte(int32_t cp);
// Maps every byte of `bytes` through ByteToUnicode.
std::string ByteLevelEncode(std::string_view bytes);
// Inverse of ByteLevelEncode. Returns false (leaving *out partly written) if a character
// is not in the table or the text is not valid UTF-8.
bool ByteLevelDecode(std::string_view text, std::string* out);

// "<0x0A>"-style byte token name (upper-case hex), as SentencePiece and HF spell them.
std::string ByteTokenName(uint8_t b);
// Parses "<0xHH>" (either case of hex digit); -1 if `text` is not such a name.
int ParseByteToken(std::string_view text);

// Unicode White_Space (what Oniguruma's and Rust's notion of white space cover).
bool IsWhiteSpace(int32_t cp);

// Copies `bytes`, replacing every byte that does not start a valid UTF-8 sequence (and
// every truncated sequence, byte by byte) with U+FFFD.
std::string SanitizeUtf8(std::string_view bytes);

}  // namespace cascade::tok

#endif  // CASCADE_MODEL_TOKENIZER_TEXT_UTIL_H_
